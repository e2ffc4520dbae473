"""One rollout: a live conversation between the rig and one system.

How this works: a thin asyncio shell around two sans-I/O halves that share one transport.
  send loop     waits for each uplink deadline on the injected clock, asks the uplink
                (rig.core.uplink: pacer + director) for the frame, sends it, and hands
                the records of what was sent to the sink
  receive loop  hands what arrives (the transport stamped it at the socket) to the listener
                (rig.core.listener: playback queue, onsets, barge-in, counting)
Both halves return records and control requests; records go to one sink (the writer thread
and live telemetry: rig.recordings.sink), requests to the transport. Nothing here awaits
the disk or computes metrics: at the end the session freezes a `SessionLog`
(rig.core.log) and metrics.json is one pure function of it (rig.core.metrics).

The session ends when the script has been played and the system has then been quiet for
`drain_quiet_s` on the playback clock (or at the hard cap `max_s`), or when the transport
fails: then the status says so with a reason, and everything recorded so far is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rig.analysis.finish import analyze_log
from rig.clock.base import Clock
from rig.core.director import Drain, Step, steps_from_plan
from rig.core.events import ControlRequest, DownAudio
from rig.core.listener import Listener, ListenerConfig, Output
from rig.core.log import SessionLog
from rig.core.metrics import Outcome, build_metrics, metrics_without_stream
from rig.core.pacer import Pacer, PacerConfig
from rig.core.plan import UserPlan
from rig.core.records import EventRecord
from rig.core.units import NS_PER_MS, NS_PER_S
from rig.core.uplink import Frame, Uplink, plan_prefill
from rig.errors import RigError, TransportError
from rig.recordings.sink import Publish, RolloutSink
from rig.recordings.writer import RolloutRecorder
from rig.transports.base import Transport


@dataclass(frozen=True, slots=True)
class SessionConfig:
    frame_ms: float = 20.0
    start_lead_ms: float = 50.0
    drain_quiet_s: float = 1.5
    max_s: float = 120.0
    onset_threshold_dbfs: float = -40.0
    onset_gap_ms: float = 300.0
    send_end: bool = True
    truncate_on_barge_in: bool = True
    probe_interval_s: float = 0.0
    #: path samples (ping round trip + TCP_INFO) every N s where the transport has them; 0 off
    path_interval_s: float = 1.0
    #: leading `prefill` audio goes out this many times faster than real time where the
    #: transport can carry it (WebSocket); sound cards and WebRTC play it in real time
    prefill_speed: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Session:
    def __init__(
        self,
        rollout_id: str,
        transport: Transport,
        plan: UserPlan,
        recorder: RolloutRecorder,
        clock: Clock,
        config: SessionConfig | None = None,
        publish: Publish | None = None,
        meta: dict[str, Any] | None = None,
        *,
        write_metrics: bool = True,
        phase: float | None = None,
    ) -> None:
        if plan.sample_rate != transport.uplink_rate:
            raise ValueError(
                f"plan is at {plan.sample_rate} Hz, the transport wants {transport.uplink_rate} Hz"
            )
        self.rollout_id = rollout_id
        self.transport = transport
        self.plan = plan
        self.clock = clock
        self.cfg = config or SessionConfig()
        self.meta = meta or {}
        self.sink = RolloutSink(recorder, publish)
        # False: the caller writes metrics.json (the runner adds timing after analysis)
        self.write_metrics = write_metrics
        #: where in the frame period this stream's deadlines fall (0..1); the runner spreads
        #: concurrent streams over the period so their sends never pile up on one instant
        self.phase = phase
        self.pacer_cfg = PacerConfig.from_ms(plan.sample_rate, self.cfg.frame_ms)
        self.outcome = Outcome("pending")
        self.uplink: Uplink | None = None
        self.listener: Listener | None = None
        self.log: SessionLog | None = None  # frozen at the end of the stream
        self._recv_error: BaseException | None = None

    async def run(self) -> dict[str, Any]:
        self.sink.status("connecting")
        t_open = self.clock.now_ns()
        try:
            await self.transport.open()
        except RigError as exc:
            return await self._finish_early(exc, t_open)
        steps = self._steps()
        n = self.pacer_cfg.frame_samples
        prefill = plan_prefill(
            steps, n, self.cfg.prefill_speed, self.transport.faster_than_real_time
        )
        t0 = self.clock.now_ns() + round(self.cfg.start_lead_ms * NS_PER_MS)
        t0 -= Pacer.head_start_ns(self.pacer_cfg, prefill.fast_frames, prefill.speed)
        if self.phase is not None:
            frame_ns = round(self.pacer_cfg.frame_ns)
            t0 += (round(self.phase * frame_ns) - t0) % frame_ns
        pacer = Pacer(self.pacer_cfg, t0, fast_frames=prefill.fast_frames, speed=prefill.speed)
        uplink = self.uplink = Uplink(steps, pacer, self.cfg.onset_threshold_dbfs)
        cfg = self.cfg
        heard = ListenerConfig(cfg.onset_threshold_dbfs, cfg.onset_gap_ms, cfg.truncate_on_barge_in)
        self.listener = Listener(t0, heard)
        self.outcome = Outcome("running")
        start = {
            "t0_ns": t0,
            "frame_ms": self.pacer_cfg.frame_ms,
            "frame_samples": n,
            "sample_rate": self.plan.sample_rate,
            "connect_ms": round((pacer.deadline_ns(0) - t_open) / 1e6, 3),  # to 1st frame
            "transport": self._describe_transport(),
            "session": self.cfg.as_dict(),
            "prefill": prefill.as_dict(),
        }
        self.sink.put(EventRecord("session.start", t0, start))
        self.sink.status("running", t0_ns=t0)
        recv = asyncio.create_task(self._receive_loop(), name=f"recv-{self.rollout_id}")
        probe = None
        if self.cfg.probe_interval_s > 0:
            probe = asyncio.create_task(self._probe_loop(), name=f"probe-{self.rollout_id}")
        path = None
        if self.cfg.path_interval_s > 0 and self.transport.samples_path:
            path = asyncio.create_task(self._path_loop(), name=f"path-{self.rollout_id}")
        try:
            self.outcome = await self._send_loop(recv, uplink)
        except RigError as exc:
            self.outcome = Outcome.of_error(exc)
        finally:
            for task in (probe, path):
                if task is not None:
                    task.cancel()
            if self.outcome.status in ("running", "ok", "timed_out") and self.cfg.send_end:
                with contextlib.suppress(RigError):
                    await self.transport.send_event("end", {})
            recv.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await recv
            await self.transport.close()
        if self._recv_error is not None and self.outcome.status == "running":
            self.outcome = Outcome.of_error(self._recv_error)
        self.log = SessionLog.of(uplink, self.listener, prefill)
        return self._close(self.log)

    async def _finish_early(self, exc: RigError, t_ns: int) -> dict[str, Any]:
        self.outcome = Outcome.of_error(exc)
        self.sink.put(EventRecord("transport.error", t_ns, {"reason": str(exc)}))
        with contextlib.suppress(Exception):
            await self.transport.close()
        metrics = metrics_without_stream(self.outcome, rollout_id=self.rollout_id, meta=self.meta)
        if self.write_metrics:
            self.sink.metrics(metrics)
        self.sink.close()
        self._publish_done()
        return metrics

    def _steps(self) -> list[Step]:
        return list(self.plan.steps or []) or [
            *steps_from_plan(self.plan.pcm, self.plan.turns, self.plan.sample_rate),
            Drain(self.cfg.drain_quiet_s, self.cfg.max_s),
        ]

    async def _send_loop(self, recv: asyncio.Task[None], uplink: Uplink) -> Outcome:
        """Frames on their deadlines until the script is over (or the cap, or a failure)."""
        assert self.listener is not None
        listener = self.listener
        max_frames = math.ceil(self.cfg.max_s * NS_PER_S / self.pacer_cfg.frame_ns)
        while True:
            seq = uplink.next_seq
            if seq >= max_frames:
                return Outcome("timed_out", f"hard cap of {self.cfg.max_s} s reached")
            if recv.done():
                if self._recv_error is not None:
                    raise self._recv_error
                if uplink.only_drain_left:
                    return Outcome("ok")
                raise TransportError("the system closed the connection before the user finished")
            deadline = uplink.pacer.deadline_ns(seq)
            await self.clock.sleep_until(deadline)
            frame = uplink.next_frame(listener.observe(deadline))
            if frame is None:
                return Outcome("ok")
            await self._emit(frame.before)  # manual activity markers lead the audio they mark
            t_sent = await self._send_audio(frame)
            records, barge_ins = uplink.sent(frame, t_sent, self.transport.sent_extra(seq))
            self.sink.put_all(records)
            for turn, t_ns in barge_ins:
                await self._emit(listener.barge_in(turn, t_ns))
            await self._emit(frame.after)
            self.sink.put_all(listener.release(t_sent))

    async def _send_audio(self, frame: Frame) -> int:
        try:
            return await self.transport.send_audio(frame.pcm, frame.seq, frame.deadline_ns)
        except TransportError:
            await asyncio.sleep(0)  # let the receive loop report a root cause first
            if self._recv_error is not None:
                raise self._recv_error from None
            raise

    async def _emit(self, outputs: Iterable[Output]) -> None:
        """Records to the sink, control requests to the system (each logged as it goes:
        a dialect or transport with no use for a kind sends nothing)."""
        for out in outputs:
            if isinstance(out, ControlRequest):
                data = out.data
                self.sink.put(EventRecord(f"control.{out.kind}", self.clock.now_ns(), data))
                await self.transport.send_event(out.kind, data)
            else:
                self.sink.put(out)

    async def _receive_loop(self) -> None:
        assert self.listener is not None
        listener = self.listener
        try:
            async for item in self.transport.receive():
                if isinstance(item, DownAudio):
                    self.sink.put_all(listener.on_audio(item))
                else:
                    self.sink.put_all(listener.on_event(item))
        except asyncio.CancelledError:
            raise
        except RigError as exc:
            self._recv_error = exc
            why = {"reason": str(exc), "error_type": type(exc).__name__}
            self.sink.put(EventRecord("transport.error", self.clock.now_ns(), why))
        except Exception as exc:  # noqa: BLE001 - recorded as a rollout error, not a crash
            self._recv_error = exc
            why = {"reason": f"{type(exc).__name__}: {exc}"}
            self.sink.put(EventRecord("session.error", self.clock.now_ns(), why))

    async def _probe_loop(self) -> None:
        """Clock probes (four-timestamp exchanges) for peers that answer them."""
        interval_ns = round(self.cfg.probe_interval_s * NS_PER_S)
        k = 0
        while True:
            await self.clock.sleep_until(self.clock.now_ns() + interval_ns)
            with contextlib.suppress(RigError):
                await self.transport.send_event("probe", {"id": k})
            k += 1

    async def _path_loop(self) -> None:
        """Round trips and send backlog through the whole session (rig.net.pathsample): a
        ping and a syscall per interval, never in the send loop's way."""
        assert self.listener is not None
        listener = self.listener
        interval_ns = round(self.cfg.path_interval_s * NS_PER_S)
        while True:
            t_start = self.clock.now_ns()
            try:
                items = await self.transport.sample_path()
            except RigError:
                items = []
            for item in items:
                self.sink.put_all(listener.on_event(item))
            await self.clock.sleep_until(t_start + interval_ns)

    def _close(self, log: SessionLog) -> dict[str, Any]:
        assert self.uplink is not None and self.listener is not None
        t_end = self.clock.now_ns()
        self.sink.put_all(self.listener.finish(t_end, self.uplink.user_track_ns))
        self.outcome = self.outcome.settled(log)
        metrics = build_metrics(
            log,
            self.outcome,
            rollout_id=self.rollout_id,
            meta=self.meta,
            transport=self._describe_transport(),
            writer_high_water=self.sink.backlog_high_water,
        )
        try:
            self.transport.finish_metrics(metrics)
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            metrics["transport_metrics_error"] = f"{type(exc).__name__}: {exc}"
        status = {"status": self.outcome.status, "reason": self.outcome.reason}
        self.sink.put(EventRecord("session.end", t_end, status))
        if self.write_metrics:
            metrics = analyze_log(metrics, log)
            self.sink.metrics(metrics)
        self.sink.close()
        if self.write_metrics:
            self.sink.results(metrics)
        self._publish_done()
        return metrics

    def _publish_done(self) -> None:
        self.sink.status("done", status=self.outcome.status, reason=self.outcome.reason)

    def _describe_transport(self) -> dict[str, Any]:
        try:
            return self.transport.describe()
        except Exception as exc:  # noqa: BLE001 - a description must not end a rollout
            return {"error": f"{type(exc).__name__}: {exc}"}
