"""`rig sim --transport device`: the reference system listening on a sound card.

A thin asyncio shell around `SimEngine`, like the WebSocket server, with a `DeviceLink`
(rig.transports.device) instead of a socket. Two tasks:
  input     every input block goes to the engine at the live shared-clock placement of its
            first sample (what "reached the model" means here); xruns go to the truth log
  emitter   wakes when a reply chunk is due and writes it to the output device

The truth log has the events of the WebSocket server (server_start, conn_open, recv_chunk,
speech_start, speech_end, reply_scheduled, reply_start, reply_chunk, reply_end,
reply_cancel), on the shared clock, plus device times in the calibration's convention
(rig.transports.device): `speech_end.audio_end_dev_ns` is where the first sample after the
user's last loud one sat in the input stream, `reply_chunk.t_ns` is when the chunk was
written to the device and `reply_chunk.t_dev_ns` where its first sample was handed to
PortAudio. Records that need device times are written once the stamps around them are
known (a quarter second later, or at stop). There is one conversation per process: a sound
card is one line, not a server socket. Audio already handed to the device on a barge-in
still plays (the cancel is logged; the rest of the reply is not written).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock, MonotonicClock
from rig.device.binding import Backend
from rig.device.link import DeviceLink
from rig.device.options import DeviceOptions
from rig.errors import DeviceError
from rig.sim.engine import SimConfig, SimEngine, Truth
from rig.sim.truth import TruthLog

Resolver = Callable[[bool], dict[str, Any] | None]


class DeviceSimServer:
    """The reference system on an input and an output device."""

    def __init__(
        self,
        cfg: SimConfig,
        opts: DeviceOptions,
        *,
        truth_log: str | None = None,
        reply_audio: Pcm16 | None = None,
        clock: Clock | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.cfg = replace(cfg.effective(), sample_rate=opts.rate)
        self.opts = opts
        self.clock = clock or MonotonicClock()
        self.link = DeviceLink(opts, self.clock, backend)  # DeviceError for bad devices
        self.engine = SimEngine(self.cfg, reply_audio)
        self.truth = TruthLog(truth_log)
        self.first_in_frame: int | None = None
        self.error: DeviceError | None = None
        self._pending: list[tuple[str, int, dict[str, Any], Resolver]] = []
        self._wake = asyncio.Event()

    def now(self) -> int:
        return self.clock.now_ns()

    async def run(self, stop: asyncio.Event, ready: Callable[[], None] | None = None) -> None:
        """Serve until `stop` is set (or the device is lost: DeviceError, after logging it)."""
        await self.link.open()
        t = self.now()
        self.truth.write(
            "server_start",
            t,
            transport="device",
            config=self.cfg.as_dict(),
            device=self.link.describe(),
        )
        self.truth.write("conn_open", t, conn=1, device=True)
        if ready is not None:
            ready()
        tasks = [
            asyncio.create_task(self._input(), name="sim-device-input"),
            asyncio.create_task(self._emitter(), name="sim-device-emitter"),
        ]
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([stopper, tasks[0]], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*tasks, stopper):
                task.cancel()
            await asyncio.gather(*tasks, stopper, return_exceptions=True)
            self._resolve(final=True)
            t_end = self.now()
            self.truth.write("conn_close", t_end, conn=1)
            self.truth.write(
                "server_stop",
                t_end,
                device={**self.link.describe(), **self.link.pa_clock_checks()},
                error=None if self.error is None else str(self.error),
            )
            with contextlib.suppress(Exception):
                await self.link.close()
            self.truth.close()
        if self.error is not None:
            raise self.error

    async def _input(self) -> None:
        link = self.link
        while True:
            try:
                b = await link.next_block()
            except DeviceError as exc:
                self.error = exc
                self.truth.write("device_lost", self.now(), reason=str(exc))
                return
            if b is None:
                return
            flags = link.note(b)
            if flags:
                self.truth.write(
                    "device_xrun", b.t_ns, direction=b.direction, flags=flags, frame=b.frame
                )
            if b.direction == "in" and b.pcm is not None:
                if self.first_in_frame is None:
                    self.first_in_frame = b.frame
                t = link.live_in.time_ns(b.frame)
                self.truth.write(
                    "recv_chunk",
                    t,
                    conn=1,
                    frame=b.frame,
                    n_samples=b.n_frames,
                    t_cb_ns=b.t_ns,
                )
                for truth in self.engine.on_audio(b.pcm[:, 0].copy(), t):
                    self._on_truth(truth)
                self._wake.set()
            self._resolve(final=False)

    def _on_truth(self, truth: Truth) -> None:
        if truth.event != "speech_end" or self.first_in_frame is None:
            self.truth.write(truth.event, truth.t_ns, conn=1, **truth.data)
            return
        # the first sample after the last loud one, as an input stream frame
        end_index = round(truth.data["audio_end_input_ms"] * self.cfg.sample_rate / 1000)
        frame = self.first_in_frame + end_index
        self._later(
            truth.event,
            truth.t_ns,
            {"conn": 1, **truth.data, "audio_end_frame": frame},
            self._device_time("in", lambda: frame, "audio_end_dev_ns"),
        )

    def _device_time(
        self, direction: str, frame_of: Callable[[], int | None], name: str
    ) -> Resolver:
        def resolve(final: bool) -> dict[str, Any] | None:
            frame = frame_of()
            if frame is None:
                return {name: None} if final else None
            if not final and not self.link.covered(direction, frame):
                return None
            stamps = self.link.in_stamps if direction == "in" else self.link.out_stamps
            t = self.link.exact_ns(direction, frame) if stamps else None
            return {"frame": frame, name: t} if direction == "out" else {name: t}

        return resolve

    def _frame_of_queued(self, index: int) -> Callable[[], int | None]:
        return lambda: self.link.play_log.frame_of(index)

    def _later(self, event: str, t_ns: int, fields: dict[str, Any], resolver: Resolver) -> None:
        self._pending.append((event, t_ns, fields, resolver))

    def _resolve(self, final: bool) -> None:
        keep = []
        for event, t_ns, fields, resolver in self._pending:
            got = resolver(final)
            if got is None:
                keep.append((event, t_ns, fields, resolver))
            else:
                self.truth.write(event, t_ns, **{**fields, **got})
        self._pending = keep

    async def _emitter(self) -> None:
        engine = self.engine
        while True:
            due = engine.next_due_ns()
            if due is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            await self.clock.sleep_until(due)
            emits, truths = engine.poll(self.now())
            for truth in truths:
                if truth.event != "reply_end":
                    self.truth.write(truth.event, truth.t_ns, conn=1, **truth.data)
            for e in emits:
                t_write = self.now()
                index = self.link.play(e.pcm)
                engine.said(t_write, e.pcm)
                self._later(
                    "reply_chunk",
                    t_write,
                    {
                        "conn": 1,
                        "seq": e.seq,
                        "n_samples": int(e.pcm.size),
                        "emit_ns": e.t_ns,
                        "write_late_ms": round((t_write - e.t_ns) / 1e6, 3),
                        "response": e.response,
                        "queue_index": index,
                        "t_out_est_ns": self.link.live_out_ns(index),
                    },
                    self._device_time("out", self._frame_of_queued(index), "t_dev_ns"),
                )
            for truth in truths:
                if truth.event == "reply_end":
                    self.truth.write(truth.event, truth.t_ns, conn=1, **truth.data)
