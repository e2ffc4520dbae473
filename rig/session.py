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
from collections.abc import Iterable
from typing import Any

from rig.aio import raise_if_cancelling
from rig.analysis.finish import analyze_log
from rig.clock.base import Clock
from rig.core.director import Drain, Step, steps_from_plan
from rig.core.events import ControlRequest, DownAudio, DownTrack
from rig.core.listener import Listener, ListenerConfig, Output
from rig.core.log import SessionLog
from rig.core.metrics import Outcome, build_metrics, metrics_without_stream
from rig.core.pacer import Pacer, PacerConfig
from rig.core.plan import UserPlan
from rig.core.records import EventRecord, TrackAudio
from rig.core.selfcheck import LoopStats, Mark, TimingTolerance, Verdict, judge_session
from rig.core.sessionconfig import SessionConfig as SessionConfig  # re-exported
from rig.core.units import NS_PER_MS, NS_PER_S
from rig.core.uplink import Frame, Uplink, plan_prefill
from rig.echo.path import EchoPath
from rig.errors import DeadlineError, RigError, TransportError
from rig.loopwatch import LoopWatch
from rig.recordings.sink import Publish, RolloutSink
from rig.recordings.writer import RolloutRecorder
from rig.sendwatch import SendWatch
from rig.transports.base import Transport

#: the wall-clock cap ends a rollout `max_s` + this after it started (connect included).
#: The paced loop ends by itself `max_s` after the first frame; the cap catches anything
#: stuck outside it (a connect, a handshake, a send, a control message)
CAP_GRACE_S = 1.0
CANCELLED = ("cancelled", "the rollout was cancelled (the run stopped)")


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
        watch: LoopWatch | None = None,
        tolerance: TimingTolerance | None = None,
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
        #: the loop's own lag, run delay and writer backlog (rig.loopwatch); the runner
        #: shares one per loop, a session on its own starts its own
        self.watch = watch or LoopWatch(clock, backlog=lambda: recorder.writer.backlog)
        self.tolerance = tolerance or TimingTolerance()
        self.verdict: Verdict | None = None  # the rig's own timing, judged at the end
        self._mark: Mark | None = None
        self._recv_error: BaseException | None = None
        #: what the session awaits on the network now, and since when (for the cap's reason)
        self._busy: tuple[str, int | None, int] | None = None
        self._stuck = False  # a deadline passed: the peer is not draining what we send
        self._blocked_ns = 0  # time spent in sends since the uplink was last on time
        self._watch = SendWatch(self.cfg.send_timeout_s)
        self._frame_ns = round(self.pacer_cfg.frame_ns)

    async def run(self) -> dict[str, Any]:
        self.watch.start()
        try:
            return await self._run()
        finally:
            await self.watch.stop()

    async def _run(self) -> dict[str, Any]:
        """The rollout, start to end. Whatever ends it (the script, the cap, a deadline, any
        exception out of the transport or dialect, a cancellation) goes through one close
        path: `session.end` with the status, uplink stats and responses so far, files closed,
        no task left running."""
        self.sink.status("connecting")
        t_open = self.clock.now_ns()
        # the wall-clock cap (asyncio's clock, outside the paced loop): connect included
        cap = asyncio.timeout(self.cfg.max_s + CAP_GRACE_S)
        self._busy = ("connecting", None, t_open)
        try:
            async with cap:
                await self.transport.open()
                self.echo = await EchoPath.for_session(self.cfg, self.plan.sample_rate, self.sink)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                await self._finish_early(Outcome(*CANCELLED), t_open)
                raise
            stray = Outcome("error", f"CancelledError out of the transport: {exc}")
            return await self._finish_early(stray, t_open, exc)
        except Exception as exc:  # noqa: BLE001 - every fault ends the rollout with a status
            if isinstance(exc, TimeoutError) and cap.expired():
                exc = DeadlineError(self._cap_reason(t_open))
            return await self._finish_early(Outcome.of_error(exc), t_open, exc)
        self._busy = None
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
        if self.plan.conditions is not None:  # level, noise, line (rig.conditions)
            uplink.hooks.append(self.plan.conditions.frame_hook(uplink.director.turns))
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
        self._mark = self.watch.mark()
        self.sink.put(EventRecord("session.start", t0, start))
        self.sink.status("running", t0_ns=t0)
        recv = asyncio.create_task(self._receive_loop(), name=f"recv-{self.rollout_id}")
        probe = None
        if self.cfg.probe_interval_s > 0:
            probe = asyncio.create_task(self._probe_loop(), name=f"probe-{self.rollout_id}")
        cancelled = False
        stream_cap = asyncio.timeout_at(cap.when())
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.create_task(
            self._watch.run(task, self._send_blocked_reason), name=f"watch-{self.rollout_id}"
        )
        path = None
        if self.cfg.path_interval_s > 0 and self.transport.samples_path:
            path = asyncio.create_task(self._path_loop(), name=f"path-{self.rollout_id}")
        try:
            async with stream_cap:
                self.outcome = await self._send_loop(recv, uplink)
        except asyncio.CancelledError as exc:
            if self._watch.fired is not None and task.cancelling():
                task.uncancel()  # our own watchdog: a send blocked past its deadline
                self._stuck = True
                self.outcome = Outcome.of_error(DeadlineError(self._watch.fired))
            elif task.cancelling():
                cancelled = True  # we were cancelled: close, then pass it on
                self.outcome = Outcome(*CANCELLED)
            else:  # a stray CancelledError out of a transport (e.g. its own deadline)
                self.outcome = Outcome("error", f"CancelledError out of the transport: {exc}")
        except Exception as exc:  # noqa: BLE001 - every fault ends the rollout with a status
            if isinstance(exc, TimeoutError) and stream_cap.expired():
                exc = DeadlineError(self._cap_reason(t_open))
            self._stuck = isinstance(exc, DeadlineError)
            self.outcome = Outcome.of_error(exc)
            if not isinstance(exc, RigError):
                why = {"reason": self.outcome.reason, "error_type": type(exc).__name__}
                self.sink.put(EventRecord("session.error", self.clock.now_ns(), why))
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if path is not None:
                path.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await path
            await self._close_connection(recv, probe)
        if self._recv_error is not None and self.outcome.status == "running":
            self.outcome = Outcome.of_error(self._recv_error)
        self.log = SessionLog.of(uplink, self.listener, prefill)
        metrics = self._close(self.log)
        if cancelled:
            raise asyncio.CancelledError
        return metrics

    async def _close_connection(
        self, recv: asyncio.Task[None], probe: asyncio.Task[None] | None
    ) -> None:
        """End the conversation, each step under its own deadline: `end` (unless the peer is
        stuck: a send could only block again), the receive loop, the transport."""
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await probe
        if (
            self.cfg.send_end
            and not self._stuck
            and self.outcome.status in ("running", "ok", "timed_out")
        ):
            try:
                await self._send_event("end", {})
            except Exception as exc:  # noqa: BLE001 - the rollout already has its status
                why = {"reason": f"end not sent: {exc}", "error_type": type(exc).__name__}
                self.sink.put(EventRecord("transport.error", self.clock.now_ns(), why))
        recv.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await recv
        await self._close_transport()

    async def _close_transport(self) -> None:
        try:
            async with asyncio.timeout(self.cfg.close_timeout_s):
                await self.transport.close()
        except Exception as exc:  # noqa: BLE001 - closing must not lose the rollout
            if isinstance(exc, TimeoutError):
                reason = f"close blocked {self.cfg.close_timeout_s:g} s"
            else:
                reason = f"close failed: {type(exc).__name__}: {exc}"
            why = {"reason": reason, "error_type": type(exc).__name__}
            self.sink.put(EventRecord("transport.close_error", self.clock.now_ns(), why))

    def _send_blocked_reason(self) -> str:
        seq = self._busy[1] if self._busy is not None else None
        return (
            f"send blocked {self.cfg.send_timeout_s:g} s: peer stopped reading (audio frame {seq})"
        )

    def _cap_reason(self, t_open_ns: int) -> str:
        """What the wall-clock cap interrupted, for the rollout's reason."""
        what = "waiting for the next frame's deadline"
        if self._busy is not None:
            kind, seq, since_ns = self._busy
            late_s = (self.clock.now_ns() - since_ns) / NS_PER_S
            what = (
                f"{kind} for {late_s:.1f} s"
                if seq is None
                else f"{kind} {seq}, due {late_s:.1f} s ago"
            )
        return f"wall-clock cap of {self.cfg.max_s:g} s (+{CAP_GRACE_S:g} s) reached while {what}"

    async def _finish_early(
        self, outcome: Outcome, t_ns: int, exc: BaseException | None = None
    ) -> dict[str, Any]:
        """The rollout ended before its stream started (connect, handshake, cap, cancel)."""
        self.outcome = outcome
        why: dict[str, Any] = {"reason": outcome.reason}
        if exc is not None:
            why["error_type"] = type(exc).__name__
        self.sink.put(EventRecord("transport.error", t_ns, why))
        await self._close_transport()
        end = {"status": outcome.status, "reason": outcome.reason}
        self.sink.put(EventRecord("session.end", self.clock.now_ns(), end))
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
        # the paced cap, on the timeline (a fast prefill takes its real duration / speed)
        cap_ns = uplink.pacer.deadline_ns(0) + round(self.cfg.max_s * NS_PER_S)
        behind_ns = round(self.cfg.send_timeout_s * NS_PER_S)
        while True:
            seq = uplink.next_seq
            deadline = uplink.pacer.deadline_ns(seq)
            if deadline >= cap_ns:
                return Outcome("timed_out", f"hard cap of {self.cfg.max_s} s reached")
            if recv.done():
                if self._recv_error is not None:
                    raise self._recv_error
                if uplink.only_drain_left:
                    return Outcome("ok")
                raise TransportError("the system closed the connection before the user finished")
            ready = self.clock.now_ns() < deadline  # else this task itself is behind
            await self.clock.sleep_until(deadline)
            if ready:  # a timer wake-up: how late it came is the loop's lag (rig.core.selfcheck)
                self.watch.monitor.frame_woke(deadline, self.clock.now_ns())
            frame = uplink.next_frame(listener.observe(deadline))
            if frame is None:
                return Outcome("ok")
            frame = frame if self.echo is None else self.echo.on_frame(frame, listener, deadline)
            if frame.before:  # manual activity markers lead the audio they mark
                await self._emit(frame.before)
            t_sent = await self._send_audio(frame)
            records, barge_ins = uplink.sent(frame, t_sent, self.transport.sent_extra(seq))
            self.sink.put_all(records)
            if t_sent - frame.deadline_ns > behind_ns and self._blocked_ns > behind_ns // 2:
                # sends drain slower than real time: stop here rather than burst later
                late_s = (t_sent - frame.deadline_ns) / NS_PER_S
                raise DeadlineError(
                    f"uplink {late_s:.1f} s behind its deadlines at frame {seq}: "
                    "peer stopped reading (or drains slower than real time)"
                )
            for turn, t_ns in barge_ins:
                await self._emit(listener.barge_in(turn, t_ns))
            if frame.after:
                await self._emit(frame.after)
            released = listener.release(t_sent)
            if released:
                self.sink.put_all(released)

    async def _send_audio(self, frame: Frame) -> int:
        """One frame to the transport, within `send_timeout_s`: a send that blocks longer
        (the peer stopped reading and the TCP window is full) ends the rollout `timed_out`;
        the frames due meanwhile are never sent (counted as `unsent_frames`), so nothing
        bursts out later and nothing queues up."""
        self._busy = ("sending audio frame", frame.seq, frame.deadline_ns)
        watch = self._watch  # the deadline: rig.sendwatch (no timer per frame)
        watch.n += 1
        watch.sending = True
        try:
            t_sent = await self.transport.send_audio(frame.pcm, frame.seq, frame.deadline_ns)
        except TransportError:
            await asyncio.sleep(0)  # let the receive loop report a root cause first
            if self._recv_error is not None:
                raise self._recv_error from None
            raise
        finally:
            watch.sending = False
        self._busy = None
        # time spent blocked in sends since the uplink was last on time: a slow-draining
        # peer shows here, a stall of our own loop does not
        if t_sent - frame.deadline_ns <= self._frame_ns:
            self._blocked_ns = 0
        self._blocked_ns += self.clock.now_ns() - t_sent
        return t_sent

    async def _send_event(self, kind: str, data: dict[str, Any]) -> None:
        """A control message to the transport, within `send_timeout_s`."""
        self._busy = (f"sending {kind!r}", None, self.clock.now_ns())
        timeout = asyncio.timeout(self.cfg.send_timeout_s)
        try:
            async with timeout:
                await self.transport.send_event(kind, data)
        except TimeoutError:
            if not timeout.expired():
                raise
            raise DeadlineError(
                f"send of {kind!r} blocked {self.cfg.send_timeout_s:g} s: peer stopped reading"
            ) from None
        self._busy = None

    async def _emit(self, outputs: Iterable[Output]) -> None:
        """Records to the sink, control requests to the system (each logged as it goes:
        a dialect or transport with no use for a kind sends nothing)."""
        for out in outputs:
            if isinstance(out, ControlRequest):
                data = out.data
                self.sink.put(EventRecord(f"control.{out.kind}", self.clock.now_ns(), data))
                await self._send_event(out.kind, data)
            else:
                self.sink.put(out)

    async def _receive_loop(self) -> None:
        assert self.listener is not None
        listener = self.listener
        try:
            async for item in self.transport.receive():
                if isinstance(item, DownAudio):
                    self.sink.put_all(listener.on_audio(item))
                elif isinstance(item, DownTrack):  # system_raw.wav: rig.transports.deviceecho
                    self.sink.put(TrackAudio(item.name, item.sample_rate, item.pcm))
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
                await self._send_event("probe", {"id": k})
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
            raise_if_cancelling()  # a cancel an await inside lost: the session is closing
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
        if self._stuck:  # frames due while the send was blocked: counted, never sent
            metrics["uplink"]["unsent_frames"] = self.uplink.pacer.skip_to(t_end)
        try:
            self.transport.finish_metrics(metrics)
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            metrics["transport_metrics_error"] = f"{type(exc).__name__}: {exc}"
        loop = self.watch.since(self._mark) if self._mark is not None else None
        self._judge(metrics, loop)
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

    def _judge(self, metrics: dict[str, Any], loop: LoopStats | None) -> None:
        """`timing_valid` and why (rig.core.selfcheck): did the rig keep its own time?"""
        verdict = judge_session(metrics, self.log, loop, self.watch.monitor, self.tolerance)
        self.verdict = verdict
        metrics["timing_valid"] = verdict.valid
        metrics["rig_timing"] = verdict.as_dict(self.tolerance)

    def _publish_done(self) -> None:
        v = self.verdict
        self.sink.status(
            "done",
            status=self.outcome.status,
            reason=self.outcome.reason,
            timing_valid=None if v is None else v.valid,
            timing_reason=None if v is None else v.reason,
        )

    def _describe_transport(self) -> dict[str, Any]:
        try:
            return self.transport.describe()
        except Exception as exc:  # noqa: BLE001 - a description must not end a rollout
            return {"error": f"{type(exc).__name__}: {exc}"}
