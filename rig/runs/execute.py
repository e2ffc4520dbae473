"""Running a prepared run in this process: the runner, the live view process, telemetry,
the impairment relay and progress lines.

`execute(config, prepared, role)` is the one way a run's rollouts are run here, for `rig
run`, `rig demo`, `rig.run_async`, a worker of `--workers N` and an engine's shard (`role`
says which). What it shows and publishes while the run streams is rig.runs.livefeed.
"""

from __future__ import annotations

import asyncio
import functools
import os
from contextlib import AsyncExitStack

from rig.clock.base import MonotonicClock
from rig.recordings.rundir import rollout_done
from rig.reporting.progress import progress_lines
from rig.runs import workers
from rig.runs.config import RunConfig
from rig.runs.livefeed import LiveFeed, is_headless
from rig.runs.records import Role
from rig.runs.relays import impair_log_path
from rig.runs.runner import RunHooks, Runner, RunnerSettings, new_run_id
from rig.runs.specs import Prepared
from rig.telemetry import events as ev
from rig.telemetry.bus import EventBus
from rig.telemetry.session_bridge import session_publisher, target_fields


def runner_settings(
    config: RunConfig, prepared: Prepared, role: Role, headless: bool
) -> RunnerSettings:
    """What the runner of this process takes: a worker runs its share of the concurrency
    (auto: each worker finds its own) and writes its own manifest."""
    k, n = role.worker_index, role.workers
    concurrency = 0 if config.scale.concurrency == "auto" else int(config.scale.concurrency)
    connect = config.scale.connect_concurrency
    if k is not None:
        if concurrency:
            concurrency = workers.share(concurrency, k, n)
        connect = workers.share(connect, k, n)
    impair = prepared.relay.describe() if prepared.relay is not None else None
    return RunnerSettings(
        run_id=config.output.run_id or new_run_id(),
        concurrency=concurrency,
        connect_concurrency=connect,
        manifest_name="manifest.json" if k is None else workers.worker_manifest_name(k),
        rt_priority=config.scale.rt_priority,
        force_resume=config.output.force_resume,
        retry_invalid=config.scale.retry_invalid,
        tolerance=config.tolerance,
        shard=config.scale.shard,
        node=role.node_id,
        seed=config.output.seed,
        asr_model=config.output.asr_model,
        argv=config.output.argv,
        config=config.describe(
            sample_rate=prepared.sample_rate,
            session=prepared.session,
            headless=headless,
            impair=impair,
            role=role,
        ),
    )


def run_specs(config: RunConfig, prepared: Prepared, role: Role | None = None) -> Runner:
    """Run the rollouts with the live view (or plain lines) and the optional MQTT bridge."""
    return asyncio.run(execute(config, prepared, role))


async def execute(config: RunConfig, prepared: Prepared, role: Role | None = None) -> Runner:
    """The run's rollouts in this process, on the caller's event loop."""
    role = role or Role()
    specs = prepared.specs
    shard = config.scale.shard
    clock = MonotonicClock()
    bus = EventBus()
    headless = is_headless(config, role)
    if role.is_worker:  # one worker of a sharded run: its share, its own manifest
        specs = workers.shard(specs, role.worker_index or 0, role.workers)
    # the runner takes the whole plan (its manifest describes the slice within it); the
    # live view counts this process's slice
    mine = [s for s in specs if shard is None or shard.owns(s.rollout_id)]
    live = LiveFeed(config, role, bus, clock, n_rollouts=len(mine))
    settings = runner_settings(config, prepared, role, headless)
    targets = {s.rollout_id: target_fields(s.target) for s in mine}
    before = (
        functools.partial(workers.wait_for_start, role.start_fd)
        if role.start_fd is not None  # a worker: stream once every worker is ready
        else None
    )
    assert settings.run_id is not None
    runner = Runner(
        config.output.out,
        settings,
        clock=clock,
        hooks=RunHooks(
            progress=live.progress,
            publish_factory=session_publisher(bus, settings.run_id, clock, targets=targets),
            before_streaming=before,
        ),
    )
    skipped = sum(
        rollout_done(os.path.join(runner.run_dir, "rollouts", s.rollout_id)) for s in mine
    )
    async with AsyncExitStack() as stack:
        relay = prepared.relay
        if relay is not None:  # its own process: the audio loop never runs the relay
            relay.start(impair_log_path(runner.run_dir))  # main thread, before any rollout
            stack.push_async_callback(asyncio.to_thread, relay.stop)
        await live.start(stack, runner.run_id)
        bus.publish(
            ev.run(
                runner.run_id,
                clock.now_ns(),
                len(mine) - skipped,
                skipped=skipped,
                concurrency=runner.concurrency,
            )
        )
        ticker = asyncio.ensure_future(
            progress_lines(
                runner.results,
                len(specs),
                skipped,
                clock,
                config.live.progress_interval_s,
                live.progress,
            )
        )
        stack.callback(ticker.cancel)
        try:
            await runner.run(specs)
            live.after_run()
        finally:
            await live.finish(runner.run_dir)
    live.after_close()  # the view is closed by now
    return runner
