"""The driver's fleet monitor without Ray: real shards' uplinks over loopback TCP, the
headless lines a local run prints (per rollout, and done/total with rate and ETA)."""

from __future__ import annotations

import asyncio
import os

from rig.clock.base import MonotonicClock
from rig.scaleout.fleetview import FleetMonitor
from rig.telemetry import EventBus, events
from rig.telemetry.fleetlink import TOKEN_ENV, FleetUplink, fleet_hello
from tests.support.wait import until


async def _shard(address: str, shard: str, ids: list[str], token: str) -> None:
    clock = MonotonicClock()
    bus = EventBus()
    os.environ[TOKEN_ENV] = token  # as the engine hands it over: the environment
    try:
        async with FleetUplink(bus, address, fleet_hello(shard, "n", clock), clock=clock):
            for rid in ids:
                bus.publish(events.status("x", rid, clock.now_ns(), "running"))
                bus.publish(
                    events.status("x", rid, clock.now_ns(), "done", status="ok", reason=None)
                )
    finally:
        del os.environ[TOKEN_ENV]


async def test_headless_lines_count_every_shard_and_what_was_done_before() -> None:
    lines: list[str] = []
    monitor = FleetMonitor(
        "fleet",
        ["a", "b", "c", "d"],
        {"d": "ok"},  # finished by an earlier run: skipped, counted
        headless=True,
        progress_interval_s=0.2,
        emit=lines.append,
    )
    address = await asyncio.to_thread(monitor.start)
    assert address.startswith("127.0.0.1:")
    try:
        await _shard(address, "0/2", ["a", "b"], monitor.token)
        await _shard(address, "1/2", ["c"], monitor.token)
        await until(
            lambda: any("progress: 4/4 rollouts done" in ln for ln in lines),
            timeout_s=10,
            what="the progress line with every rollout done",
        )
        monitor.notice("rig run --engine ray: shard 1/2: exit 0")
    finally:
        await asyncio.to_thread(monitor.stop)
    assert {"a: ok [shard 0/2]", "b: ok [shard 0/2]", "c: ok [shard 1/2]"} <= set(lines)
    done = [ln for ln in lines if ln.startswith("progress: 4/4")]
    assert "(ok 4)" in done[0] and "rate " in done[0] and "ETA 0s" in done[0]
    assert lines[-1] == "rig run --engine ray: shard 1/2: exit 0"
    assert monitor.stats.connections == 2 and monitor.stats.refused == 0
