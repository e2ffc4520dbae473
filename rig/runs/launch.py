"""A run from start to end, wherever it goes: this process, worker processes, an engine.

`run_async(config)` is what `rig.run_async` awaits and `run(config)` what `rig run` calls:
prepare (check, resolve, build the rollouts), then one of three places to run them: this
process (rig.runs.execute), `--workers N` processes on this machine (rig.runs.sharded) or
an engine's shards (rig.runs.engine). Each ends in an `Outcome` the front-end turns into
its answer (a RunResult, a summary and an exit status). Nothing here prints a summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any

from rig.hostwatch import HostWatch
from rig.ids import check_id
from rig.runs import engine as engine_run
from rig.runs.config import RunConfig, otel_endpoint
from rig.runs.eventloop import run_on
from rig.runs.execute import execute
from rig.runs.hostreport import host_summary, write_host_report
from rig.runs.records import Role
from rig.runs.runner import new_run_id
from rig.runs.sharded import resolve_workers, run_workers
from rig.runs.specs import Prepared, prepare
from rig.status import exit_verdict


@dataclass(frozen=True)
class Outcome:
    """Where a run went and how it ended (what a summary and an exit status need)."""

    run_id: str
    run_dir: str
    planned: int  # rollouts planned (all processes)
    stop_reason: str | None = None
    #: rollout id -> metrics of the rollouts this process ran ({} when others ran them)
    results: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    #: worker or shard processes that failed (their exit status not 0 or 3), if any
    failed_codes: tuple[int, ...] = ()
    #: the run's own verdict where it is already known without the summary (an engine's)
    verdict: int | None = None
    where: str = "here"  # here, workers, engine
    #: with --host-watch: flagged rollout (or attempt) dir -> how much of its lateness
    #: overlapped a pause of the whole machine (rig.runs.hostreport); None: not watched
    host: dict[str, dict[str, Any]] | None = None
    host_summary: dict[str, Any] | None = None

    def exit_code(self, rollouts: list[dict[str, Any]]) -> int:
        """The run's exit status from its rollouts' metrics (as the summary read them)."""
        if self.failed_codes:
            return max(self.failed_codes)
        if self.verdict is not None:
            return self.verdict
        return exit_verdict(
            (m.get("status") for m in rollouts),
            timing_valid=(m.get("timing_valid") for m in rollouts),
            complete=len(rollouts) >= self.planned or self.where == "here",
            stopped=bool(self.stop_reason),
        )


def resolved(config: RunConfig) -> RunConfig:
    """`--shard K/N` runs into `<run-id>-shard-K-of-N` (a new id when none was given)."""
    shard = config.scale.shard
    if shard is None:
        return config
    run_id = config.output.run_id or new_run_id()
    return config.replace(output__run_id=check_id(f"{run_id}-{shard.dir_suffix}", "--run-id"))


async def run_async(config: RunConfig) -> Outcome:
    """The run, on the caller's event loop (`--loop` applies where rig starts one: `run`,
    worker processes); worker processes and engines run from a thread (they only wait for
    their children)."""
    config = resolved(config)
    # scenario files, WAV decoding and device checks block: not on the caller's loop
    prepared = await asyncio.to_thread(prepare, config)
    ids = [s.rollout_id for s in prepared.specs]
    if config.engine.engine != "local":
        return await asyncio.to_thread(_on_engine, config, ids)
    if not config.scale.host_watch:
        return await _run_local(config, prepared, ids)
    # the observers are started from this thread: they die with the thread that started them
    watch = HostWatch(max(5, config.scale.rt_priority + 2))
    watch.start()
    await watch.wait_ready()
    try:
        outcome = await _run_local(config, prepared, ids)
    finally:
        observed = await asyncio.to_thread(watch.stop)
    host = await asyncio.to_thread(write_host_report, outcome.run_dir, observed)
    return dataclasses.replace(outcome, host=host, host_summary=host_summary(observed))


async def _run_local(config: RunConfig, prepared: Prepared, ids: list[str]) -> Outcome:
    n = resolve_workers(config, len(ids))
    if n > 1:
        return await asyncio.to_thread(_on_workers, config, ids, n)
    return await run_here(config, prepared)


def run(config: RunConfig) -> Outcome:
    """Blocking `run_async` (`rig run`), on the event loop `--loop` names."""
    return run_on(config.scale.loop, run_async(config))


async def run_here(config: RunConfig, prepared: Prepared, role: Role | None = None) -> Outcome:
    """The rollouts in this process, then (with --otel) their traces, exported off the loop
    after the last rollout."""
    runner = await execute(config, prepared, role)
    if config.output.otel:
        from rig.reporting.otel import export_run  # the otel extra

        n = await asyncio.to_thread(export_run, runner.run_dir)
        print(f"rig run: exported {n} spans to {otel_endpoint()} (OTLP/HTTP)", file=sys.stderr)
    return Outcome(
        runner.run_id,
        runner.run_dir,
        len(prepared.specs),
        runner.stop_reason,
        dict(runner.results),
    )


def _on_workers(config: RunConfig, ids: list[str], n: int) -> Outcome:
    done = run_workers(config, ids, n)
    failed = tuple(c for c in done.codes if c not in (0, 3))
    if failed:
        print(f"rig run: a worker failed (exit {done.codes}); see above", file=sys.stderr)
    stop = done.manifest.get("stop_reason")
    return Outcome(
        done.run_id,
        done.run_dir,
        len(ids),
        str(stop) if stop else None,
        failed_codes=failed,
        where="workers",
    )


def _on_engine(config: RunConfig, ids: list[str]) -> Outcome:
    done = engine_run.run_engine(config, ids)
    return dataclasses.replace(
        Outcome(done.run_id, done.run_dir, len(ids), verdict=done.verdict, where="engine"),
        failed_codes=done.failed_codes,
    )
