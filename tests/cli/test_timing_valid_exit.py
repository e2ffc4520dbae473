"""`rig run` when the rig's own timing fails: exit 3, each rollout named with why, the
status kept, the tolerance in the manifest, and `rig report` leaving it out of aggregates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rig.cli import EXIT_OK, EXIT_ROLLOUTS_FAILED
from rig.rtbudget import rt_budget
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime
WAV = str(Path(__file__).resolve().parents[2] / "rig" / "data" / "turn_what.wav")


def rig_run(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rig", "run", WAV, "--target", url, "--out", str(out),
           "--run-id", "r", "--headless", "--drain-quiet-s", "0.5", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_tolerance_the_rig_cannot_meet_exits_3_with_the_reason(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "0.5", "--latency-ms", "200")
    try:
        # a 10 us tolerance: no real loop wakes that precisely, so the verdict must be false;
        # the loop's arrival stamps (the kernel's are exact: nothing to bound)
        r = rig_run(
            url, tmp_path, "--timing-tolerance-ms", "0.01", "--loop-lag-max-ms", "0.01",
            "--arrival-stamps", "loop",
        )  # fmt: skip
    finally:
        stop_sim(sim)
    assert r.returncode == EXIT_ROLLOUTS_FAILED, r.stderr[-2000:]
    assert "rig run: turn_what: the rig's own timing failed (" in r.stderr, r.stderr[-2000:]
    assert "a received chunk stamped up to" in r.stderr  # --loop-lag-max-ms bounds them
    m = json.loads((tmp_path / "r" / "rollouts" / "turn_what" / "metrics.json").read_text())
    assert m["status"] == "ok" and m["timing_valid"] is False  # the conversation kept its status
    assert m["rig_timing"]["tolerance"]["lateness_p99_ms"] == 0.01
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["config"]["timing_tolerance"]["loop_lag_max_ms"] == 0.01
    assert manifest["timing_invalid"] == ["turn_what"]
    # the kernel's real-time budget it ran under, named in the closing lines where it throttles
    sched = manifest["scheduling"]
    fifo = sched["policy"] == "SCHED_FIFO"
    assert sched.get("rt_budget") == (rt_budget() if fifo else None)
    named = "kernel.sched_rt_runtime_us" in r.stderr
    assert named == bool(fifo and (sched["rt_budget"] or {}).get("throttles")), r.stderr[-2000:]
    rep = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(tmp_path / "r"), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    report = json.loads(rep.stdout)
    assert report["timing_invalid"] == ["turn_what"]
    assert report["scenarios"][0]["latency_ms"]["n"] == 0  # left out of the aggregate


def test_exit_status_and_summary_follow_the_verdict(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "0.5", "--latency-ms", "200")
    try:
        # generous bounds; still, a stall or a starved loop on a loaded box is a real verdict
        r = rig_run(url, tmp_path, "--timing-tolerance-ms", "50", "--loop-lag-max-ms", "200")
    finally:
        stop_sim(sim)
    m = json.loads((tmp_path / "r" / "rollouts" / "turn_what" / "metrics.json").read_text())
    assert m["status"] == "ok"
    if m["timing_valid"]:
        assert r.returncode == EXIT_OK and not m["rig_timing"]["reasons"], r.stderr[-2000:]
        assert "│ ok " in r.stdout or "| ok " in r.stdout
    else:  # the shared box starved the loop: then it must say so, not exit 0
        assert r.returncode == EXIT_ROLLOUTS_FAILED and m["rig_timing"]["reasons"]
        assert "rig run: turn_what: the rig's own timing failed (" in r.stderr
        assert "bad" in r.stdout
