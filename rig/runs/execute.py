"""Running built specs: the runner, the live view process, telemetry and progress.

Split from rig.cli.common (which builds the specs) so each module holds one concept; heavy
modules are imported inside the functions, as there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import sys
from typing import TYPE_CHECKING, Any

from rig.cli.capacity import (
    be_worker,
    runner_concurrency,
    tolerance_of,
)
from rig.errors import ConfigError

if TYPE_CHECKING:
    from rig.runner import RolloutSpec, Runner


def run_specs(args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]) -> Runner:
    """Run the rollouts with the live view (or plain lines) and the optional MQTT bridge."""
    return asyncio.run(_run_specs(args, specs, config))


async def run_specs_async(
    args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]
) -> Runner:
    """The same run inside an event loop that is already running (rig.run_async)."""
    return await _run_specs(args, specs, config)


async def _run_specs(
    args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]
) -> Runner:
    from contextlib import AsyncExitStack

    from rich.console import Console

    from rig import workers
    from rig.cli.netopts import impair_config
    from rig.clock.base import MonotonicClock
    from rig.recordings.rundir import rollout_done
    from rig.runner import Runner
    from rig.shard import parse_shard
    from rig.telemetry import events as ev
    from rig.telemetry.bus import EventBus
    from rig.telemetry.session_bridge import session_publisher, target_fields

    asr_model = getattr(args, "asr_model", None)
    if asr_model:
        from rig.extras import require

        require("asr", "--asr-model")
        config = {**config, "asr_model": asr_model}
    shard = parse_shard(args.shard) if getattr(args, "shard", None) else None
    clock = MonotonicClock()
    bus = EventBus()
    # only to ask whether stderr is a terminal: the live view draws in its own process
    k, n = getattr(args, "worker_index", None), getattr(args, "workers", 1)
    headless = bool(args.headless) or not Console(stderr=True).is_terminal or k is not None
    if k is not None:  # one worker of a sharded run: its share, its own manifest
        be_worker(args)
        specs = workers.shard(specs, k, n)
        config = {
            **config,
            "concurrency": args.concurrency,
            "connect_concurrency": args.connect_concurrency,
        }
    # the runner takes the whole plan (its manifest describes the slice within it); the
    # live view counts this process's slice
    mine = [s for s in specs if shard is None or shard.owns(s.rollout_id)]
    view: Any = None

    def progress(line: str) -> None:
        if view is None or not view.alive:
            print(line, file=sys.stderr, flush=True)

    runner = Runner(
        args.out,
        run_id=args.run_id,
        concurrency=runner_concurrency(args)
        if k is None or args.concurrency == "auto"  # auto: each worker finds its own
        else workers.share(args.concurrency, k, n),
        connect_concurrency=args.connect_concurrency
        if k is None
        else workers.share(args.connect_concurrency, k, n),
        manifest_name="manifest.json" if k is None else workers.worker_manifest_name(k),
        rt_priority=args.rt_priority,
        force_resume=bool(getattr(args, "force_resume", False)),
        tolerance=tolerance_of(args),
        shard=shard,
        node=getattr(args, "node_id", None),
        clock=clock,
        seed=args.seed,
        config={
            **config,
            "mqtt": bool(getattr(args, "mqtt", None)),
            "headless": headless,
            **impair_config(args),
        },
        progress=progress,
        asr_model=asr_model,
    )
    start_fd = getattr(args, "start_fd", None)
    if start_fd is not None:  # a worker: stream once every worker is ready (rig.workers)
        runner.before_streaming = functools.partial(workers.wait_for_start, start_fd)
    targets = {s.rollout_id: target_fields(s.target) for s in mine}
    runner.publish_factory = session_publisher(bus, runner.run_id, clock, targets=targets)
    skipped = sum(
        rollout_done(os.path.join(runner.run_dir, "rollouts", s.rollout_id)) for s in mine
    )
    relay = getattr(args, "impair_relay", None)
    async with AsyncExitStack() as stack:
        if relay is not None:  # its own process: the audio loop never runs the relay
            from rig.cli.netopts import impair_log_path

            relay.start(impair_log_path(runner.run_dir))  # main thread, before any rollout
            stack.push_async_callback(asyncio.to_thread, relay.stop)
        if not headless:
            from rig.telemetry.viewproc import ViewProcess

            # big fleets: half the drawing (the view's CPU competes with the run's other threads)
            view = ViewProcess(
                bus,
                detail=getattr(args, "detail", None),
                refresh_hz=4.0 if len(mine) <= 10 else 2.0,
                clock=clock,
            )
            if await view.start():
                stack.push_async_callback(_close_view, view)
            else:
                print(f"rig: {view.error}; plain progress lines instead", file=sys.stderr)
                view = None
        device_probe = None
        if getattr(args, "mqtt", None):
            from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url

            await stack.enter_async_context(
                MqttPublisher(bus, parse_mqtt_url(args.mqtt), clock=clock)
            )
            if getattr(args, "device_clock", None):
                from rig.telemetry.deviceclock import DeviceClockProbe

                device_probe = await stack.enter_async_context(
                    DeviceClockProbe(
                        parse_mqtt_url(args.mqtt), runner.run_id, args.device_clock, bus=bus
                    )
                )
        elif getattr(args, "device_clock", None):
            raise ConfigError("--device-clock needs --mqtt URL (the device answers over MQTT)")
        uplink = None
        if getattr(args, "fleet_feed", None):  # a shard or worker: telemetry to its driver
            from rig.telemetry.fleetlink import FleetUplink, fleet_hello

            uplink = await stack.enter_async_context(
                FleetUplink(
                    bus,
                    args.fleet_feed,
                    fleet_hello(
                        args.shard or (f"worker-{k}" if k is not None else None),
                        getattr(args, "node_id", None),
                        clock,
                    ),
                    clock=clock,
                )
            )
        bus.publish(
            ev.run(
                runner.run_id,
                clock.now_ns(),
                len(mine) - skipped,
                skipped=skipped,
                concurrency=runner.concurrency,
            )
        )
        probing = (
            asyncio.create_task(device_probe.probe_every(args.device_probe_interval_s))
            if device_probe is not None
            else None
        )
        if view is not None:
            view_closed = asyncio.ensure_future(_announce_view_closed(view))
            stack.callback(view_closed.cancel)
        from rig.reporting.progress import progress_lines

        every_s = getattr(args, "progress_interval_s", 10.0)
        ticker = asyncio.ensure_future(
            progress_lines(runner.results, len(specs), skipped, clock, every_s, progress)
        )
        stack.callback(ticker.cancel)
        try:
            await runner.run(specs)
            if uplink is not None and uplink.error:
                progress(f"rig: {uplink.error} (the run went on without it)")
        finally:
            if probing is not None and device_probe is not None:
                probing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await probing
                from rig.recordings.writer import write_json_atomic

                await asyncio.to_thread(
                    write_json_atomic,
                    os.path.join(runner.run_dir, "device_clock.json"),
                    device_probe.summary(),
                )
    return runner


async def _close_view(view: Any) -> None:
    """The run is over: the view draws its final frame and exits before the summary prints."""
    await view.stop()
    stats = view.feed.stats
    if stats.dropped or stats.dropped_queue:
        print(
            f"rig: the live view fell behind: {stats.dropped + stats.dropped_queue} telemetry "
            "events were not shown (the recordings are complete)",
            file=sys.stderr,
        )


async def _announce_view_closed(view: Any) -> None:
    """`q` in the view closes the view, not the run: say so, then plain progress lines."""
    from rig.telemetry.viewproc import VIEW_CLOSED, closed_by_user

    if await closed_by_user(view):
        print(VIEW_CLOSED, file=sys.stderr, flush=True)
