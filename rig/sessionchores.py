"""A rollout's periodic chores, clock probes and path samples, from the clock's tick.

Why: as tasks of their own, each probe (every 0.5 s by default) and each path sample (every
second) cost a timer wake-up, a task step, the futures of an awaited send and ping and,
for the ping, an armed timeout: at 100 rollouts about 12 µs per uplink frame, an eighth of
the rig's CPU (docs/pacing.md, "Eighth pass"). From the tick they run synchronously in
the wake that already serves the stream's frames.

How this works: `Chores.start` registers each chore with the clock's tick (`call_at`). A
probe is due just after one of the stream's own frame deadlines (1 ns after it, so the
frames of that wake go first), every `probe_interval_s`. A path sample is due every
`path_interval_s` at a phase drawn anew within the frame period each time: read always just
after a frame's write, the kernel's smoothed RTT (which moves with the delayed ACKs of
one-way traffic within each period) showed a floor of 8 ms on a loopback hop whose floor
is under 2 ms (tests/relay/test_relay.py); a phase that walks, as the old task's did,
samples it fairly. A probe is written at once
(`Transport.send_event_now`); a path sample reads the TCP state and writes its ping at once
(`Transport.sample_path_now`), and the ping's `net.rtt` is emitted when the pong comes off
the socket. Whatever cannot be done without waiting (the socket not writable now, a
transport without the non-waiting calls) is done the slow way in a task, as the loops of
rig.sessionlink do it, one at a time per chore; a chore whose slow task is still running
skips its turn. Records and failures are those of the loops: a probe that fails to send is
skipped, events go through the listener to the sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine
from typing import Any

from rig.clock.base import TickClock
from rig.clock.timer import TickHandle
from rig.core.events import DownEvent
from rig.core.listener import Listener
from rig.core.pacer import Pacer
from rig.core.units import NS_PER_S
from rig.errors import RigError
from rig.sessionlink import Link


class Chores:
    """Probes and path samples of one session, served from its clock's tick."""

    def __init__(self, link: Link, listener: Listener, clock: TickClock, pacer: Pacer) -> None:
        self.link = link
        self.listener = listener
        self.clock = clock
        self.pacer = pacer
        self._handles: list[TickHandle] = []
        self._slow: dict[str, asyncio.Task[None]] = {}  # chore -> its slow task, if running
        self._probe_k = 0
        #: the path samples' phases (seeded: a run on a virtual clock repeats itself)
        self._rng = random.Random(0x9A7)
        self._path_first = True
        self.probes = 0  # probes written from the tick (the rest went the slow way)
        self.samples = 0  # path samples whose ping was written from the tick

    def start(self, probe: bool, path: bool) -> bool:
        """Register the chores asked for; False: this clock has no tick (nothing started:
        the caller runs the loops instead)."""
        cfg = self.link.cfg
        chores: list[tuple[Callable[[int], None], float]] = []
        if probe:
            chores.append((self._probe, cfg.probe_interval_s))
        if path:
            chores.append((self._path, cfg.path_interval_s))
        now = self.link.clock.now_ns()
        for chore, interval_s in chores:
            interval_ns = round(interval_s * NS_PER_S)
            if chore == self._probe:  # the probe loop's first probe came one interval in
                tick, first = self._every(chore, interval_ns, now + interval_ns, self._on_frame)
            else:  # the path loop sampled at once (the path before the stream loads it)
                tick, first = self._every(chore, interval_ns, now, self._any_phase)
            handle = self.clock.call_at(first, tick)
            if handle is None:
                self.cancel()
                return False
            self._handles.append(handle)
        return True

    def _after(self, t_ns: int) -> int:
        """The first of this stream's frame deadlines at or after `t_ns`, plus 1 ns (one
        wake serves the frames, then the chore)."""
        pacer = self.pacer
        seq = pacer.next_seq
        first = pacer.deadline_ns(seq)
        if t_ns > first:
            frame_ns = pacer.config.frame_ns
            seq += -(-(t_ns - first) // round(frame_ns))
        return max(pacer.deadline_ns(seq), t_ns) + 1

    def _on_frame(self, t_ns: int) -> int:
        return self._after(t_ns)

    def _any_phase(self, t_ns: int) -> int:
        """`t_ns` plus a fresh offset within one frame period (none for the first sample,
        at the start)."""
        if self._path_first:
            self._path_first = False
            return t_ns
        return t_ns + self._rng.randrange(max(1, round(self.pacer.config.frame_ns)))

    def _every(
        self,
        chore: Callable[[int], None],
        interval_ns: int,
        start_ns: int,
        place: Callable[[int], int],
    ) -> tuple[Callable[[int], int], int]:
        """The tick function of a chore due at `start_ns` and every `interval_ns` after it
        (each turn where `place` puts its nominal time; the nominal times do not drift), and
        its first deadline."""
        nominal = [start_ns]

        def tick(deadline: int) -> int:
            chore(deadline)
            nominal[0] += interval_ns
            return place(nominal[0])

        return tick, place(nominal[0])

    def _probe(self, deadline: int) -> None:
        k = self._probe_k
        self._probe_k += 1
        if self._running("probe"):
            return
        try:
            sent = self.link.transport.send_event_now("probe", {"id": k})
        except RigError:  # as the probe loop: a probe that fails is skipped
            return
        if sent:
            self.probes += 1
            return
        self._spawn("probe", self._probe_slow(k))

    async def _probe_slow(self, k: int) -> None:
        with contextlib.suppress(RigError):
            await self.link.send_event("probe", {"id": k})

    def _path(self, deadline: int) -> None:
        if self._running("path"):
            return
        try:
            ping_sent = self.link.transport.sample_path_now(self.emit)
        except RigError:
            return
        if ping_sent:
            self.samples += 1
            return
        self._spawn("path", self._path_slow())

    async def _path_slow(self) -> None:
        try:
            items = await self.link.transport.path_round_trip()
        except RigError:
            return
        self.emit(items)

    def emit(self, items: list[DownEvent]) -> None:
        """Path events to the listener and the sink (called from the tick and from the
        socket's read, where a fault must not break the connection: it goes to the loop's
        exception handler)."""
        try:
            for item in items:
                self.link.sink.put_all(self.listener.on_event(item))
        except Exception as exc:  # noqa: BLE001 - reported, never raised into a socket read
            asyncio.get_running_loop().call_exception_handler(
                {"message": "path sample records failed", "exception": exc}
            )

    def _running(self, name: str) -> bool:
        task = self._slow.get(name)
        return task is not None and not task.done()

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        self._slow[name] = asyncio.get_running_loop().create_task(coro, name=f"chore-{name}")

    def cancel(self) -> None:
        """No chore after this (the slow tasks are cancelled; `stop` awaits them)."""
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()
        for task in self._slow.values():
            task.cancel()

    async def stop(self) -> None:
        self.cancel()
        for task in list(self._slow.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._slow.clear()
