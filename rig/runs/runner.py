"""Runs: many rollouts, one run directory, one writer thread, one manifest.

Each rollout is a `Session` with its own transport. A rollout that fails records its status
and reason and never takes the others down; the manifest counts statuses at the end. Resume:
running again into an existing run directory skips rollouts whose metrics.json says `ok`
(or another final, non-error status) and redoes the rest.

metrics.json is written once per rollout, by the runner, after the session has ended, the
writer thread has closed that rollout's files (a barrier op) and the timing analysis
(rig.analysis.finish) has run in a separate process (one worker, started on first use, at
low priority) so it never competes with the audio loop for the GIL. If the analysis fails,
metrics.json is still written, with `timing: {"error": ...}`, `pass: null` and status
`analysis_error` (rig.analysis.outcome): not ok, redone on resume.

A rollout whose files could not be written (the writer's per-rollout error) ends
`write_error` with the file and errno in `reason`; resume redoes it. When the error says the
file system is full or read-only, the run stops starting rollouts (`manifest.status =
"stopped"`, `stop_reason`), lets the running ones finish, and says why.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import random
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from rig import realtime
from rig.analysis.finish import analyze_log, finish_rollout
from rig.analysis.outcome import settle_analysis
from rig.childproc import AnalysisWorker, analysis_pool
from rig.clock.base import Clock, MonotonicClock
from rig.core.log import SessionLog
from rig.core.plan import UserPlan
from rig.core.selfcheck import TimingTolerance
from rig.errors import DataFileError
from rig.ids import check_id
from rig.loopwatch import AutoGate, LoopWatch
from rig.recordings import resume
from rig.recordings.jsonwrite import describe_os_error, write_json_atomic
from rig.recordings.manifest import build_manifest, utc_now
from rig.recordings.rundir import attempt_counts, move_aside, read_json, rollout_done
from rig.recordings.sink import Publish
from rig.recordings.writer import DISK_FULL_ERRNOS, RecordingWriter
from rig.runs.eventloop import event_loop
from rig.runs.metricsfile import redacted, write_metrics_json
from rig.runs.phases import phase_of
from rig.runs.retry import redo_invalid, run_with_retries
from rig.session import Session, SessionConfig
from rig.shard import Shard
from rig.transports.base import Transport


@dataclass
class RolloutSpec:
    rollout_id: str
    plan: UserPlan
    make_transport: Callable[[Clock, asyncio.Semaphore], Transport]
    target: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    session_config: SessionConfig | None = None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass(frozen=True, kw_only=True)
class RunnerSettings:
    """How the runner runs (frozen; rig.runs.execute builds it from a RunConfig)."""

    run_id: str | None = None  # None: a new one
    concurrency: int = 1  # rollouts at once; 0: auto (AIMD on the loop's lag, AutoGate)
    connect_concurrency: int = 8
    seed: int = 0
    rt_priority: int = 0  # SCHED_FIFO for the loop thread (rig/realtime.py)
    #: rollouts start at least this far apart: their ends (each session's close costs the
    #: loop a few ms) and their connects do not pile up into one long loop block
    start_interval_s: float = 0.02
    analyze: bool = True  # the analysis in a worker process (False: the split in a thread)
    analysis_timeout_s: float = 120.0
    #: faster-whisper model for word onsets, run in the analysis worker (None: asr off)
    asr_model: str | None = None
    #: what the rig tolerates of its own timing before a rollout is not timing_valid
    tolerance: TimingTolerance = field(default_factory=TimingTolerance)
    #: resume into a run directory recorded with another configuration (recorded)
    force_resume: bool = False
    #: run a rollout again, up to this many more times, when its own timing was not valid;
    #: every earlier attempt is kept beside as `<id>.failed-K` (rig.recordings.rundir)
    retry_invalid: int = 0
    manifest_name: str = "manifest.json"  # a worker's own (rig.runs.workers)
    #: run only this slice of the rollouts (rig.shard; docs/scale-out.md)
    shard: Shard | None = None
    node: str | None = None  # where this runs (default: the host name)
    #: the run's part of the manifest's config block (RunConfig.describe)
    config: Mapping[str, Any] = field(default_factory=dict)
    #: the command line the manifest records (None: this process's)
    argv: tuple[str, ...] | None = None

    def describe(self) -> dict[str, Any]:
        """The manifest's config block: the runner's own settings, then the run's."""
        return {
            "concurrency": "auto" if self.concurrency <= 0 else self.concurrency,
            "connect_concurrency": max(1, self.connect_concurrency),
            "start_interval_s": max(0.0, self.start_interval_s),
            "analyze": self.analyze,
            "rt_priority": self.rt_priority,
            "timing_tolerance": self.tolerance.as_dict(),
            "retry_invalid": max(0, self.retry_invalid),
            **self.config,  # a worker records the run's totals (rig.runs.workers)
        }


@dataclass(frozen=True, kw_only=True)
class RunHooks:
    """What the runner calls out to (each optional)."""

    #: a line for the user (plain progress, notes)
    progress: Callable[[str], None] | None = None
    #: a rollout id -> where its records are published (live telemetry)
    publish_factory: Callable[[str], Publish] | None = None
    #: awaited once everything is set up, before the first rollout streams (a worker of
    #: `rig run --workers` waits there for the others: rig.runs.workers.StartBarrier)
    before_streaming: Callable[[], Awaitable[None]] | None = None


class Runner:
    """Many rollouts into one run directory. Built once from frozen inputs, never changed
    from outside: `settings` (how), `clock`, `writer` (the recording writer thread) and
    `hooks` (progress lines, telemetry, the start barrier)."""

    def __init__(
        self,
        out_dir: str,
        settings: RunnerSettings | None = None,
        *,
        clock: Clock | None = None,
        writer: RecordingWriter | None = None,
        hooks: RunHooks | None = None,
    ) -> None:
        s = self.settings = settings or RunnerSettings()
        h = hooks or RunHooks()
        self.manifest_name = s.manifest_name
        self._before_streaming = h.before_streaming
        self.tolerance = s.tolerance
        self.asr_model = s.asr_model
        self.shard = s.shard
        #: where this process runs, written into every metrics.json: per-node monotonic
        #: times are never compared across nodes, so each rollout says which node it ran on
        host = socket.gethostname()
        self.placement: dict[str, Any] = {
            "host": host,
            "node": s.node or host,
            "shard": s.shard.label if s.shard is not None else None,
        }
        self.force_resume = s.force_resume
        self.retry_invalid = max(0, s.retry_invalid)
        #: rollout id -> attempts of this run redone because their own timing failed
        self.retried: dict[str, int] = {}
        self.start_interval_ns = round(max(0.0, s.start_interval_s) * 1e9)
        self._next_start_ns = 0
        self.analyze = s.analyze
        self.rt_priority = s.rt_priority
        self.analysis_timeout_s = s.analysis_timeout_s
        self._pool: AnalysisWorker | None = None
        self._phase_counter = 0
        self.analysis_error: str | None = None
        self.run_id = check_id(s.run_id, "--run-id") if s.run_id is not None else new_run_id()
        self.run_dir = os.path.join(out_dir, self.run_id)
        self.auto = s.concurrency <= 0  # --concurrency auto: AIMD on the loop's lag (AutoGate)
        self.concurrency = max(1, s.concurrency)
        self.connect_gate_size = max(1, s.connect_concurrency)
        self.clock = clock or MonotonicClock()
        self.seed = s.seed
        #: the run's own random numbers (never the global RNG: rig.run may share a process)
        self.rng = random.Random(s.seed)
        self._publish_factory = h.publish_factory
        self.writer = writer or RecordingWriter()
        #: one loop, one watch: every session's verdict reads the same monitor
        self.watch = LoopWatch(self.clock, backlog=lambda: self.writer.backlog)
        self.progress = h.progress or (lambda line: None)
        self.io = realtime.IoThreads()  # blocking calls, on threads started before streaming
        self.results: dict[str, dict[str, Any]] = {}
        #: why the run stopped starting rollouts (a full disk), None while it goes on
        self.stop_reason: str | None = None

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.progress(f"run stopped: {reason}; no more rollouts are started")

    async def run(self, specs: Sequence[RolloutSpec]) -> dict[str, Any]:
        # the loop's thread gets real-time scheduling (if asked and permitted) for the whole run
        with realtime.scheduling(self.rt_priority) as sched:
            return await self._run(specs, sched)

    async def _run(self, specs: Sequence[RolloutSpec], sched: dict[str, Any]) -> dict[str, Any]:
        for spec in specs:  # each becomes a directory: one safe path part, before any I/O
            check_id(spec.rollout_id, "rollout id")
        all_ids = [s.rollout_id for s in specs]
        targets = _unique_targets(specs)  # the run's, even for a shard that gets no rollout
        if self.shard is not None:  # the filter hook: this process runs one slice
            shard = self.shard
            specs = [s for s in specs if shard.owns(s.rollout_id)]
        try:
            os.makedirs(os.path.join(self.run_dir, "rollouts"), exist_ok=True)
        except OSError as exc:
            raise DataFileError(self.run_dir, f"cannot create: {describe_os_error(exc)}") from exc
        manifest_path = os.path.join(self.run_dir, self.manifest_name)
        previous: dict[str, Any] = {}
        # the run's manifest; for a worker whose parent was killed before it merged one, the
        # worker's own from that attempt (rig.runs.workers): either way a resume is recorded
        for name in dict.fromkeys(("manifest.json", self.manifest_name)):
            with contextlib.suppress(OSError, ValueError):
                loaded = read_json(os.path.join(self.run_dir, name))  # may block
                previous = loaded if isinstance(loaded, dict) else {}
            if previous:
                break
        manifest = build_manifest(
            self.run_id,
            config=self.settings.describe(),
            targets=targets,
            seed=self.seed,
            started_ns=self.clock.now_ns(),
            argv=self.settings.argv,
        )
        manifest["rollouts"] = {
            s.rollout_id: {"meta": s.meta, "plan": s.plan.describe()} for s in specs
        }
        manifest["shard"] = self.shard.describe(all_ids) if self.shard is not None else None
        manifest["node"] = self.placement["node"]
        if previous:
            manifest = resume.resumed(previous, manifest, self.run_dir, force=self.force_resume)
        manifest["scheduling"] = {**sched, "event_loop": event_loop()}
        if sched.get("reason") and sched.get("requested_priority"):
            self.progress(
                f"note: normal scheduling for the audio loop ({sched['reason']}); on a busy "
                "machine frames can be late (see docs/pacing.md)"
            )
        manifest["status"] = "running"
        try:
            write_json_atomic(manifest_path, manifest)
        except OSError as exc:
            raise DataFileError(manifest_path, describe_os_error(exc)) from exc

        self.writer.start()
        if self.analyze and todo_any(specs, self.run_dir):
            # start the analysis worker before any audio flows: spawning it costs the loop
            # ~10 ms and the child's imports a core for a while; neither should hit a stream
            try:
                await loop_run(self._analysis_pool(), _warm_up)
            except Exception as exc:  # noqa: BLE001 - metrics without timing, not a dead run
                self.analyze = False
                self.analysis_error = f"analysis worker did not start: {type(exc).__name__}: {exc}"
                self._pool = None
        auto = AutoGate(self.watch) if self.auto else None
        gate = auto or asyncio.Semaphore(self.concurrency)
        open_gate = asyncio.Semaphore(self.connect_gate_size)
        todo = []
        earlier = await self.io.run(attempt_counts, os.path.join(self.run_dir, "rollouts"))
        for spec in specs:
            d = os.path.join(self.run_dir, "rollouts", spec.rollout_id)
            if rollout_done(d):
                done = await self.io.run(read_json, os.path.join(d, "metrics.json"))
                beside = earlier.get(spec.rollout_id, 0)
                if redo_invalid(done, beside, self.retry_invalid):
                    self.progress(f"{spec.rollout_id}: its own timing was not valid, redone")
                    # the recorded attempts count against N: the redo is the next retry
                    self.retried[spec.rollout_id] = beside + 1
                    todo.append(spec)
                    continue
                self.results[spec.rollout_id] = done
                self.progress(f"{spec.rollout_id}: already done, skipped")
                continue
            todo.append(spec)
        if todo and self._before_streaming is not None:
            await self._before_streaming()

        async def one(spec: RolloutSpec) -> None:
            async with gate:
                if self.stop_reason is not None:
                    return  # not started: a resume runs it
                now = self.clock.now_ns()
                start = max(now, self._next_start_ns)
                self._next_start_ns = start + self.start_interval_ns
                if start > now:
                    await self.clock.sleep_until(start)
                result = await run_with_retries(
                    spec.rollout_id,
                    lambda: self._run_one(spec, open_gate),
                    self.retry_invalid,
                    lambda: self.stop_reason is not None,
                    self.progress,
                    self.retried,
                )
                self.results[spec.rollout_id] = result

        await self.io.start()
        try:
            # no full GC and a 1 ms GIL switch interval while streaming (rig/realtime.py)
            with realtime.streaming():
                self.watch.start()
                try:
                    await asyncio.gather(*(one(s) for s in todo))
                finally:
                    await self.watch.stop()
        finally:
            await self.io.stop()
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)
            await asyncio.to_thread(self.writer.close, 30)
            counts = Counter(r.get("status", "error") for r in self.results.values())
            invalid = sorted(
                rid for rid, r in self.results.items() if r.get("timing_valid") is False
            )
            manifest["timing_invalid"] = invalid
            manifest["retried_invalid"] = dict(sorted(self.retried.items()))
            manifest["concurrency_auto"] = auto.aimd.summary() if auto else None
            if len(self.results) == len(specs):
                manifest["status"] = "done"
            else:
                manifest["status"] = "stopped" if self.stop_reason else "interrupted"
            manifest["stop_reason"] = self.stop_reason
            manifest["status_counts"] = dict(counts)
            manifest["ended_utc"] = utc_now()
            manifest["ended_ns"] = self.clock.now_ns()
            manifest["writer"] = {
                "backlog_high_water": self.writer.high_water,
                "errors": self.writer.errors[:20],
                "dropped_after_error": self.writer.dropped_after_error,
            }
            try:
                await asyncio.to_thread(write_json_atomic, manifest_path, manifest)
            except OSError as exc:
                self.progress(f"manifest.json not updated: {describe_os_error(exc)}")
        return {
            "run_dir": self.run_dir,
            "results": self.results,
            "status_counts": dict(counts),
            "stop_reason": self.stop_reason,
        }

    async def _run_one(self, spec: RolloutSpec, open_gate: asyncio.Semaphore) -> dict[str, Any]:
        d = os.path.join(self.run_dir, "rollouts", spec.rollout_id)
        publish = self._publish_factory(spec.rollout_id) if self._publish_factory else None
        self.progress(f"{spec.rollout_id}: start")
        try:
            await self.io.run(move_aside, d)  # disk work off the audio loop
            transport = spec.make_transport(self.clock, open_gate)
            rec = self.writer.rollout(d, spec.plan.sample_rate)
            phase = phase_of(self._phase_counter)
            self._phase_counter += 1
            session = Session(
                spec.rollout_id,
                transport,
                spec.plan,
                rec,
                self.clock,
                spec.session_config,
                publish,
                spec.meta,
                phase=phase,
                watch=self.watch,
                tolerance=self.tolerance,
            )
            metrics = await session.run()
            metrics = await self._finish_metrics(d, spec, metrics, session.log)
            session.sink.results(metrics)
        except Exception as exc:  # noqa: BLE001 - one rollout failing never takes down the others
            is_disk = isinstance(exc, OSError)
            metrics = {
                "status": "write_error" if is_disk else "error",
                "reason": describe_os_error(exc) if is_disk else f"{type(exc).__name__}: {exc}",
                "rollout_id": spec.rollout_id,
                **spec.meta,
                "responses": [],
            }
            if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                self._stop(f"the disk is full: {metrics['reason']}")
            metrics = await self._write_metrics(d, metrics)
        lat = [
            r["latency_ms"] for r in metrics.get("responses", []) if r.get("latency_ms") is not None
        ]
        self.progress(
            f"{spec.rollout_id}: {metrics['status']}"
            + (f" latency_ms={','.join(f'{x:.0f}' for x in lat)}" if lat else "")
            + (f" ({metrics.get('reason')})" if metrics.get("reason") else "")
            + (
                f" [timing not valid: {'; '.join(metrics['rig_timing']['reasons'])}]"
                if metrics.get("timing_valid") is False
                else ""
            )
        )
        return metrics

    async def _finish_metrics(
        self, d: str, spec: RolloutSpec, metrics: dict[str, Any], log: SessionLog | None
    ) -> dict[str, Any]:
        """Wait for the rollout's files, add `timing` and `pass`, write metrics.json once."""
        loop = asyncio.get_running_loop()
        try:
            await self.writer.written(self.analysis_timeout_s)
            write_error = self.writer.rollout_error(d)
            if write_error is not None:
                # the files are incomplete: no analysis of them, the rollout is redone on resume
                metrics = {
                    **metrics,
                    "status": "write_error",
                    "reason": f"recording failed: {write_error}",
                    "session_status": metrics.get("status"),
                    "session_reason": metrics.get("reason"),
                }
                if self.writer.disk_full(d):
                    self._stop(f"the disk is full: {write_error}")
                metrics = await self.io.run(analyze_log, metrics, log)
                metrics = {**metrics, "timing": {"error": "not analysed: files incomplete"}}
                metrics["pass"] = None
            elif self.analyze:
                async with asyncio.timeout(self.analysis_timeout_s):
                    metrics = await loop.run_in_executor(
                        self._analysis_pool(),
                        functools.partial(
                            finish_rollout,
                            d,
                            metrics,
                            log,
                            kind=spec.meta.get("kind"),
                            rules=spec.meta.get("rules"),
                            asr_model=self.asr_model,
                        ),
                    )
            else:
                # no worker process: the split is still needed, in a thread (it is short)
                metrics = await self.io.run(analyze_log, metrics, log)
            if self.analysis_error:
                metrics = {**metrics, "timing": {"error": self.analysis_error}, "pass": None}
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            if isinstance(exc, BrokenProcessPool):
                self._pool = None  # a crashed worker: start a fresh one next time
            if "clock_fit" not in metrics or metrics.get("clock_fit") is None:
                metrics = await self.io.run(analyze_log, metrics, log)
            metrics = {
                **metrics,
                "timing": {"error": f"{type(exc).__name__}: {exc}"},
                "pass": None,
            }
        return await self._write_metrics(d, settle_analysis(metrics))

    async def _write_metrics(self, d: str, metrics: dict[str, Any]) -> dict[str, Any]:
        """metrics.json, off the loop. If it cannot be written the rollout is a write_error
        (in the run's results and manifest; no file, so a resume redoes it)."""

        metrics = {**redacted(metrics), **self.placement}
        try:
            await self.io.run(write_metrics_json, d, metrics)
        except OSError as exc:
            text = describe_os_error(exc)
            if exc.errno in DISK_FULL_ERRNOS:
                self._stop(f"the disk is full: {text}")
            return {**metrics, "status": "write_error", "reason": f"metrics.json: {text}"}
        return metrics

    def _analysis_pool(self) -> AnalysisWorker:
        if self._pool is None:
            self._pool = analysis_pool(__name__)
        return self._pool


def todo_any(specs: Sequence[RolloutSpec], run_dir: str) -> bool:
    return any(not rollout_done(os.path.join(run_dir, "rollouts", s.rollout_id)) for s in specs)


async def loop_run(pool: concurrent.futures.Executor, fn: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(pool, fn)


def _warm_up() -> None:
    """Runs in the worker: importing this module (at spawn) loaded the analysis stack
    before the first rollout ends; this call only proves the worker is up."""


def _unique_targets(specs: Sequence[RolloutSpec]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for s in specs:
        if s.target not in seen:
            seen.append(s.target)
    return seen
