"""An in-memory system for FakeClock tests: the reference engine behind a Transport.

No sockets: `send_audio` hands the frame to `SimEngine` at (now + uplink delay) and an
emitter task delivers reply chunks at (due + downlink delay) on the same FakeClock, so a
whole conversation runs in virtual time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from rig.audio.pcm import Pcm16
from rig.clock.base import FakeClock
from rig.core.events import DownAudio, DownEvent, Incoming
from rig.core.units import NS_PER_MS
from rig.sim.engine import SimConfig, SimEngine
from rig.transports.base import Transport


class MemorySystem(Transport):
    uplink_rate = 16_000

    def __init__(
        self,
        clock: FakeClock,
        cfg: SimConfig | None = None,
        *,
        up_delay_ms: float = 0.0,
        down_delay_ms: float = 0.0,
        hang_up_after_s: float | None = None,
    ) -> None:
        self.clock = clock
        self.engine = SimEngine(cfg or SimConfig())
        self.up_ns = round(up_delay_ms * NS_PER_MS)
        self.down_ns = round(down_delay_ms * NS_PER_MS)
        self.hang_up_after_s = hang_up_after_s
        self._q: asyncio.Queue[Incoming | BaseException | None] = asyncio.Queue()
        self._wake = asyncio.Event()
        self._emitter: asyncio.Task[None] | None = None
        self.sent: list[tuple[int, int]] = []  # (seq, t_ns)
        self.truths: list[Any] = []
        self._t_open = 0

    async def open(self) -> None:
        self._t_open = self.clock.now_ns()
        self._emitter = asyncio.create_task(self._emit())

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        t = self.clock.now_ns()
        if self.hang_up_after_s is not None and t - self._t_open > self.hang_up_after_s * 1e9:
            from rig.errors import TransportError

            self._q.put_nowait(TransportError("peer hung up"))
            raise TransportError("peer hung up")
        self.sent.append((seq, t))
        self.truths.extend(self.engine.on_audio(pcm.copy(), t + self.up_ns))
        self._wake.set()
        return t

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        return None

    async def _emit(self) -> None:
        while True:
            due = self.engine.next_due_ns()
            if due is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            await self.clock.sleep_until(due + self.down_ns)
            emits, truths = self.engine.poll(self.clock.now_ns() - self.down_ns)
            self.truths.extend(truths)
            for t in truths:
                if t.event == "reply_start":
                    self._q.put_nowait(DownEvent("response.start", self.clock.now_ns(), {}))
            for e in emits:
                self._q.put_nowait(DownAudio(e.pcm, 16_000, self.clock.now_ns(), e.t_ns / 1e6))

    async def receive(self) -> AsyncIterator[Incoming]:
        while True:
            item = await self._q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def close(self) -> None:
        if self._emitter is not None:
            self._emitter.cancel()
        self._q.put_nowait(None)

    def describe(self) -> dict[str, Any]:
        return {"kind": "memory"}
