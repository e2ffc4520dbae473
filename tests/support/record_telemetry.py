"""Record what a real run's view feed sends: `python -m tests.support.record_telemetry OUT`.

A real fleet against `rig sim` in its own process: the three demo turns twice (6 rollouts,
4 at once, so two wait), plus one rollout whose target refuses connections (it fails). The
session publishers, the bus and the `ViewFeed` are the ones `rig run` uses; every message the
feed sends to the view is appended to OUT (one versioned JSON payload per line, exactly the
bytes on the socket). To give the view every kind of row, the script also does what a real
run only does on a bad day or what other parts will publish: it blocks the loop for 70 ms
once while the first rollouts stream (so they stall), publishes one per-target `rtt` event
(as the network work will), and a final `done` status with `timing_valid: false` for one
rollout (as the capacity work will). tests/data/telemetry/fleet.ndjson was made this way.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time

from rig.clock.base import MonotonicClock
from rig.runs.runner import RolloutSpec, RunHooks, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.scenarios import resolve
from rig.session import SessionConfig
from rig.telemetry import EventBus
from rig.telemetry import events as ev
from rig.telemetry.session_bridge import session_publisher, target_fields
from rig.telemetry.viewfeed import ViewFeed, socket_pair
from tests.support.simproc import start_sim, stop_sim


async def record(out_path: str, url: str) -> None:
    clock = MonotonicClock()
    bus = EventBus()
    items = resolve("builtin:demo", 16_000)
    specs = []
    for rep in range(2):
        for item in items:
            specs.append(
                RolloutSpec(
                    f"{item.item_id}-r{rep}",
                    item.plan,
                    ws_factory(url, "rig", 16_000, {}),
                    {"url": url, "transport": "ws", "dialect": "rig"},
                    {"repeat": rep},
                    SessionConfig(drain_quiet_s=0.8, max_s=20, probe_interval_s=0.5),
                )
            )
    bad = "ws://127.0.0.1:9/nobody"
    specs.append(
        RolloutSpec(
            "refused",
            items[0].plan,
            ws_factory(bad, "rig", 16_000, {}),
            {"url": bad, "transport": "ws", "dialect": "rig"},
            {},
            SessionConfig(max_s=5),
        )
    )
    ours, theirs = socket_pair()
    theirs.setblocking(False)
    with tempfile.TemporaryDirectory() as tmp, open(out_path, "wb") as out:  # noqa: ASYNC230
        targets = {s.rollout_id: target_fields(s.target) for s in specs}
        runner = Runner(
            tmp,
            RunnerSettings(run_id="fleet", concurrency=4, analyze=False),
            clock=clock,
            hooks=RunHooks(publish_factory=session_publisher(bus, "fleet", clock, targets=targets)),
        )
        feed = ViewFeed(bus, ours, on_message=out.write)
        feed.start()
        loop = asyncio.get_running_loop()

        def drain() -> None:
            while True:
                try:
                    if not theirs.recv(1 << 20):
                        return
                except BlockingIOError:
                    return

        loop.add_reader(theirs.fileno(), drain)
        bus.publish(ev.run("fleet", clock.now_ns(), len(specs), concurrency=4))

        async def disturb() -> None:
            await asyncio.sleep(2.0)
            time.sleep(0.07)  # noqa: ASYNC251 - block the loop: every streaming rollout stalls
            host = target_fields({"url": url})["target"]
            bus.publish(ev.rtt("fleet", "", clock.now_ns(), 0.42, method="ping", target=host))

        side = asyncio.create_task(disturb())
        await runner.run(specs)
        await side
        bus.publish(
            ev.status(
                "fleet",
                "weather-r1",
                clock.now_ns(),
                "done",
                status="ok",
                timing_valid=False,
                timing_reason="writer backlog over 2 s",
                **targets["weather-r1"],
            )
        )
        await feed.stop()
        loop.remove_reader(theirs.fileno())
        theirs.close()


def main() -> None:
    proc, url = start_sim("--reply-s", "1.5")
    try:
        asyncio.run(record(sys.argv[1], url))
    finally:
        stop_sim(proc)


if __name__ == "__main__":
    main()
