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
What it awaits on the network (sends under deadlines, the listening loops, the close) is
rig.sessionlink. It never writes metrics.json: it returns the stream's metrics and its log,
and the runner adds the analysis and writes the file once (rig.runs.runner).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock, TickClock
from rig.core.director import Drain, Step, steps_from_plan
from rig.core.listener import Listener, ListenerConfig
from rig.core.log import SessionLog
from rig.core.metrics import Outcome, build_metrics, judge_metrics, metrics_without_stream
from rig.core.pacer import Pacer, PacerConfig
from rig.core.plan import UserPlan
from rig.core.records import EventRecord, Record
from rig.core.selfcheck import Mark, TimingTolerance, Verdict
from rig.core.sessionconfig import SessionConfig as SessionConfig  # re-exported
from rig.core.units import NS_PER_MS, NS_PER_S
from rig.core.uplink import Frame, Uplink, plan_prefill
from rig.echo.path import EchoPath
from rig.errors import DeadlineError, TransportError
from rig.loopwatch import LoopWatch
from rig.recordings.levels import SILENT_SRC
from rig.recordings.sink import Publish, RolloutSink
from rig.recordings.writer import RolloutRecorder
from rig.sessionchores import Chores
from rig.sessionlink import CANCELLED, Link
from rig.sessionlink import CAP_GRACE_S as CAP_GRACE_S  # re-exported
from rig.sessiontick import Parts, Tick
from rig.transports.base import Transport


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
        #: how far behind its deadlines the uplink may fall while sends drain slowly
        self._behind_ns = round(self.cfg.send_timeout_s * NS_PER_S)
        self.meta = meta or {}
        self.sink = RolloutSink(recorder, publish)
        self.rollout_dir = recorder.dir  # where the runner writes metrics.json
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
        self.echo: EchoPath | None = None  # the system's own echo in its uplink (rig.echo)
        self.link = Link(transport, clock, self.cfg, self.sink, round(self.pacer_cfg.frame_ns))
        self.tick: Tick | None = None  # the fast path, while the stream runs

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
        link = self.link
        link.busy = ("connecting", None, t_open)
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
                exc = DeadlineError(link.cap_reason(t_open))
            return await self._finish_early(Outcome.of_error(exc), t_open, exc)
        link.busy = None
        steps = self._steps()
        n = self.pacer_cfg.frame_samples
        prefill = plan_prefill(
            steps, n, self.cfg.prefill_speed, self.transport.faster_than_real_time
        )
        lead_ns = round(self.cfg.start_lead_ms * NS_PER_MS)
        t0 = Pacer.origin_ns(
            self.pacer_cfg, self.clock.now_ns(), lead_ns, prefill.fast_frames, prefill.speed,
            self.phase,
        )  # fmt: skip
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
            "transport": self.link.describe_transport(),
            "session": self.cfg.as_dict(),
            "prefill": prefill.as_dict(),
        }
        self._mark = self.watch.mark()
        self.sink.put(EventRecord("session.start", t0, start))
        self.sink.status("running", t0_ns=t0)
        listener = self.listener
        recv = asyncio.create_task(link.receive_loop(listener), name=f"recv-{self.rollout_id}")
        want_probe = self.cfg.probe_interval_s > 0
        want_path = self.cfg.path_interval_s > 0 and self.transport.samples_path
        chores = None  # probes and path samples from the clock's tick (rig.sessionchores)
        if self.cfg.tick and isinstance(self.clock, TickClock) and (want_probe or want_path):
            chores = Chores(link, listener, self.clock, pacer)
            if not chores.start(want_probe, want_path):
                chores = None
        probe = None
        if want_probe and chores is None:
            probe = asyncio.create_task(link.probe_loop(), name=f"probe-{self.rollout_id}")
        cancelled = False
        stream_cap = asyncio.timeout_at(cap.when())
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.create_task(
            link.watch.run(task, link.send_blocked_reason), name=f"watch-{self.rollout_id}"
        )
        path = None
        if want_path and chores is None:
            path = asyncio.create_task(link.path_loop(listener), name=f"path-{self.rollout_id}")
        try:
            async with stream_cap:
                self.outcome = await self._send_loop(recv, uplink)
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - every fault ends it
            self.outcome, cancelled = link.outcome_of(exc, task, stream_cap, t_open)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if path is not None:
                path.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await path
            if chores is not None:
                await chores.stop()
            await link.close_connection(recv, probe, self.outcome.status)
        if link.recv_error is not None and self.outcome.status == "running":
            self.outcome = Outcome.of_error(link.recv_error)
        self.log = SessionLog.of(uplink, self.listener, prefill)
        t_end = self.clock.now_ns()
        metrics = self._close_metrics(self.log, t_end)
        # the close's analysis in two stretches with the loop's due work between them (other
        # rollouts' frames, arrivals): ~0.5 ms each instead of ~1.2 ms at once (p50 at 200
        # rollouts; docs/pacing.md, eleventh pass); a cancel meanwhile still closes it first
        cancelled = await _let_due_work_run() or cancelled
        self._close_verdict(metrics, self.log, t_end)
        if cancelled:
            raise asyncio.CancelledError
        return metrics

    async def _finish_early(
        self, outcome: Outcome, t_ns: int, exc: BaseException | None = None
    ) -> dict[str, Any]:
        """The rollout ended before its stream started (connect, handshake, cap, cancel)."""
        self.outcome = outcome
        why: dict[str, Any] = {"reason": outcome.reason}
        if exc is not None:
            why["error_type"] = type(exc).__name__
        self.sink.put(EventRecord("transport.error", t_ns, why))
        await self.link.close_transport()
        end = {"status": outcome.status, "reason": outcome.reason}
        self.sink.put(EventRecord("session.end", self.clock.now_ns(), end))
        metrics = metrics_without_stream(self.outcome, rollout_id=self.rollout_id, meta=self.meta)
        self.sink.close()
        self.sink.done(self.outcome.status, self.outcome.reason, self.verdict)
        return metrics

    def _steps(self) -> list[Step]:
        return list(self.plan.steps or []) or [
            *steps_from_plan(self.plan.pcm, self.plan.turns, self.plan.sample_rate),
            Drain(self.cfg.drain_quiet_s, self.cfg.max_s),
        ]

    async def _send_loop(self, recv: asyncio.Task[None], uplink: Uplink) -> Outcome:
        """Frames on their deadlines until the script is over (or the cap, or a failure):
        from the clock's tick where the clock and the transport allow it (rig.sessiontick),
        else (and for any frame the tick hands back) awaited here."""
        assert self.listener is not None
        listener = self.listener
        # the paced cap, on the timeline (a fast prefill takes its real duration / speed)
        cap_ns = uplink.pacer.deadline_ns(0) + round(self.cfg.max_s * NS_PER_S)
        tick = None
        if self.cfg.tick and self.transport.sends_now and isinstance(self.clock, TickClock):
            parts = Parts(uplink, listener, self.link, self.sink, self.watch.monitor, self.echo)
            # a transport with extra chunk fields per frame (a sound card's device times)
            # records every frame the general way
            plain = type(self.transport).sent_extra is Transport.sent_extra
            sent_pcm = self._sent_pcm if plain else None
            tick = self.tick = Tick(parts, self.clock, recv, cap_ns, self._sent, sent_pcm)
        while True:
            if tick is not None:
                back = await self.link.raising_root_cause(tick.run())
                if back is None:
                    tick = None  # this clock has no tick here: the slow way from now on
                elif back.outcome is not None:
                    return back.outcome
                elif back.frame is not None:
                    await self._finish_frame(back.frame, back.t_sent, back.barge_ins)
                    continue
            seq = uplink.next_seq
            deadline = uplink.pacer.deadline_ns(seq)
            if deadline >= cap_ns:
                return Outcome("timed_out", f"hard cap of {self.cfg.max_s} s reached")
            if recv.done():
                if self.link.recv_error is not None:
                    raise self.link.recv_error
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
            await self._finish_frame(frame, None, [])

    async def _finish_frame(
        self, frame: Frame, t_sent: int | None, barge_ins: list[tuple[int, int]]
    ) -> None:
        """The rest of one frame, from where the tick left it (`t_sent` None: unsent)."""
        assert self.listener is not None
        if t_sent is None:
            if frame.before:  # manual activity markers lead the audio they mark
                await self.link.emit(frame.before)
            t_sent = await self.link.send_audio(frame)
            barge_ins = self._sent(frame, t_sent)
        for turn, t_ns in barge_ins:
            await self.link.emit(self.listener.barge_in(turn, t_ns))
        if frame.after:
            await self.link.emit(frame.after)
        released = self.listener.release(t_sent)
        if released:
            self.sink.put_all(released)

    def _sent(self, frame: Frame, t_sent: int) -> list[tuple[int, int]]:
        """A frame went out: its records to the sink; the barge-ins it started."""
        uplink = self.uplink
        assert uplink is not None
        extra = self.transport.sent_extra(frame.seq)
        plain = None if extra is not None else uplink.sent_plain(frame, t_sent)
        if plain is not None:  # most frames: one hand-off, no record objects (rig.recordings)
            barge_ins: list[tuple[int, int]] = []
            src = SILENT_SRC if frame.silent else None  # silence: its level from a table
            pcm, clean, seq, deadline = frame.pcm, frame.clean, frame.seq, frame.deadline_ns
            self._plain_records(plain, pcm, clean, seq, deadline, t_sent, src)
        else:
            records, barge_ins = uplink.sent(frame, t_sent, extra)
            self.sink.put_all(records)
            self._check_behind(frame.seq, frame.deadline_ns, t_sent)
        return barge_ins

    def _sent_pcm(
        self, seq: int, deadline_ns: int, pcm: Pcm16, t_sent: int, clean: Pcm16 | None
    ) -> None:
        """`_sent` for the tick's plain frame (`Uplink.plain_pcm`: no marks, no barge-in;
        only where the transport has no `sent_extra`): no `Frame` made. `clean`: the frame
        before the hooks (None: no hooks)."""
        uplink = self.uplink
        assert uplink is not None
        plain = uplink.sent_plain_seq(seq, t_sent)
        self._plain_records(plain, pcm, clean, seq, deadline_ns, t_sent, uplink.plain_src)

    def _plain_records(
        self,
        plain: tuple[int, list[Record]],
        pcm: Pcm16,
        clean: Pcm16 | None,
        seq: int,
        deadline_ns: int,
        t_sent: int,
        src: tuple[Pcm16, int] | None = None,
    ) -> None:
        late, records = plain
        sink = self.sink
        assert self.uplink is not None
        sink.up_frame(pcm, clean, self.uplink.rate, seq, t_sent, deadline_ns, late, src)
        if records:
            sink.put_all(records)
        self._check_behind(seq, deadline_ns, t_sent)

    def _check_behind(self, seq: int, deadline_ns: int, t_sent: int) -> None:
        if self.link.behind(t_sent, deadline_ns, self._behind_ns):
            # sends drain slower than real time: stop here rather than burst later
            late_s = (t_sent - deadline_ns) / NS_PER_S
            raise DeadlineError(
                f"uplink {late_s:.1f} s behind its deadlines at frame {seq}: "
                "peer stopped reading (or drains slower than real time)"
            )

    def _close_metrics(self, log: SessionLog, t_end: int) -> dict[str, Any]:
        """The first stretch of the close: the rollout's metrics from its log."""
        assert self.uplink is not None and self.listener is not None
        self.sink.put_all(self.listener.finish(t_end, self.uplink.user_track_ns))
        self.outcome = self.outcome.settled(log)
        metrics = build_metrics(
            log,
            self.outcome,
            rollout_id=self.rollout_id,
            meta=self.meta,
            transport=self.link.describe_transport(),
            writer_high_water=self.sink.backlog_high_water,
        )
        # how many frames went out from the shared tick (the rest were awaited one by one)
        metrics["uplink"]["tick_frames"] = self.tick.frames if self.tick is not None else 0
        if self.link.stuck:  # frames due while the send was blocked: counted, never sent
            metrics["uplink"]["unsent_frames"] = self.uplink.pacer.skip_to(t_end)
        try:
            self.transport.finish_metrics(metrics)
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            metrics["transport_metrics_error"] = f"{type(exc).__name__}: {exc}"
        return metrics

    def _close_verdict(self, metrics: dict[str, Any], log: SessionLog, t_end: int) -> None:
        """The second: the rig's timing verdict, `session.end`, the sink closed."""
        loop = self.watch.since(self._mark) if self._mark is not None else None
        exact = self.transport.exact_stamps()
        self.verdict = judge_metrics(
            metrics, log, loop, self.watch.monitor, self.tolerance, exact=exact
        )
        status = {"status": self.outcome.status, "reason": self.outcome.reason}
        self.sink.put(EventRecord("session.end", t_end, status))
        self.sink.close()
        self.sink.done(self.outcome.status, self.outcome.reason, self.verdict)


async def _let_due_work_run() -> bool:
    """Yield twice: the loop polls (a tick's timerfd, sockets) between the two, so what fell
    due meanwhile runs before the caller's next stretch; after a single yield the caller
    would run first again. True when the task was cancelled meanwhile."""
    try:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        return True
    return False
