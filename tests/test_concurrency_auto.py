"""--concurrency auto under overload: the event loop shares one CPU with two busy processes
(normal scheduling); all rollouts at once make every frame late, the AIMD gate runs fewer at
once. With a third of a CPU even one rollout's wake-ups are a CFS slice late, so auto cannot
reach the 5 ms budget here: what must hold is that it saw the lag and held rollouts back.
The lateness of both runs is printed (median rollout p99, five runs on a loaded shared box:
auto 6.3-28.8 ms vs all at once 6.7-70.2 ms; auto better in four of five)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.session import SessionConfig
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime
RATE = 16_000
N = 16
HOG = "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    pass\n"


async def _run(url: str, out: str, concurrency: int) -> tuple[np.ndarray, Runner]:
    plan = PlanBuilder(RATE).add_silence(0.1).add_turn(tone(300, 0.8, RATE), "t").build()
    specs = [
        RolloutSpec(f"r{i}", plan, ws_factory(url, "rig", RATE, {}), {"url": url}, {},
                    SessionConfig(drain_quiet_s=0.3, max_s=30))
        for i in range(N)
    ]  # fmt: skip
    settings = RunnerSettings(concurrency=concurrency, analyze=False, rt_priority=0,
                              start_interval_s=0.0)  # fmt: skip
    runner = Runner(out, settings)
    result = await runner.run(specs)
    late = [
        lat
        for m in result["results"].values()
        for lat in [m["uplink"]["lateness_ms"]["p99"]]
        if m.get("uplink")
    ]
    return np.asarray(late), runner


def test_auto_runs_fewer_at_once_and_keeps_frames_closer_to_their_deadlines() -> None:
    sim, url = start_sim("--reply-s", "0.3", "--latency-ms", "100")
    cpu = sorted(os.sched_getaffinity(0))[0]
    saved = os.sched_getaffinity(0)
    hogs = [subprocess.Popen([sys.executable, "-c", HOG % cpu]) for _ in range(2)]
    os.sched_setaffinity(0, {cpu})  # the loop (and its writer) share one CPU with the hogs
    try:
        with tempfile.TemporaryDirectory() as out:
            fixed, _ = asyncio.run(_run(url, out, N))
            auto, runner = asyncio.run(_run(url, out + "-auto", 0))
    finally:
        os.sched_setaffinity(0, saved)
        for h in hogs:
            h.kill()
            h.wait()
        stop_sim(sim)
    manifest = json.loads(Path(runner.run_dir, "manifest.json").read_text())
    auto_info = manifest["concurrency_auto"]
    assert manifest["config"]["concurrency"] == "auto"
    assert auto_info["max_limit_reached"] < N, auto_info  # it held rollouts back
    assert auto_info["over_budget_intervals"] >= 1, auto_info  # it saw the lag and backed off
    # the lateness itself is reported, not asserted: on a box shared with other test suites
    # the two runs' ratio swung from 0.6 to 6.6 in five runs (docs/pacing.md)
    top = auto_info["max_limit_reached"]
    print(f"rollout p99 median: auto {np.median(auto):.1f} ms vs all at once "
          f"{np.median(fixed):.1f} ms; auto limit max {top}")  # fmt: skip
