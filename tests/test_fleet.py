"""Many rollouts at once: builtin:timing x 7 (49) at --concurrency 50 against the reference system
(its own process): every stall recorded, every rollout whose own timing failed flagged
(timing_valid false, reasons, exit 3), verdicts right where the rig's timing held; and
resume after a SIGKILL of `rig run` redoes only the rollouts that were missing or failed."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import wait_for

pytestmark = pytest.mark.realtime

ITEMS = (
    "pause", "turn_taking", "backchannel", "interruption", "user_backchannel", "whisper", "noisy",
)  # fmt: skip
REPEAT = 7  # 7 items x 7 = 49 rollouts
N = len(ITEMS) * REPEAT


def start_fleet_sim() -> tuple[subprocess.Popen[str], str]:
    return start_sim("--reply-s", "3", "--latency-ms", "300")


def run_cmd(url: str, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "rig", "run", "builtin:timing", "--target", url,
        "--out", str(out), "--run-id", "fleet", "--headless",
        "--concurrency", "50", "--connect-concurrency", "16", "--repeat", str(REPEAT),
    ]  # fmt: skip


def rollout_ids() -> set[str]:
    return {f"{item}-r{k}" for item in ITEMS for k in range(REPEAT)}


def test_timing_suite_at_concurrency_50_records_every_stall(tmp_path: Path) -> None:
    sim, url = start_fleet_sim()
    try:
        t = time.monotonic()
        r = subprocess.run(run_cmd(url, tmp_path), capture_output=True, text=True, timeout=180)
        wall_s = time.monotonic() - t
    finally:
        stop_sim(sim)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    run = tmp_path / "fleet"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status_counts"] == {"ok": N}, manifest["status_counts"]
    assert manifest["config"]["concurrency"] == 50
    # the loop thread asked for SCHED_FIFO (rig/realtime.py); CI runs as root and gets it
    assert manifest["scheduling"]["requested_priority"] == 3
    if os.geteuid() == 0:
        assert manifest["scheduling"]["policy"] == "SCHED_FIFO", manifest["scheduling"]
    verdicts: dict[str, set[bool]] = {}
    invalid = set()
    for rid in rollout_ids():
        m = json.loads((run / "rollouts" / rid / "metrics.json").read_text())
        assert "error" not in m["timing"], m["timing"]
        events = (run / "rollouts" / rid / "events.jsonl").read_text()
        # stalls are a fact of a shared 2-core box (capacity is measured in bench/, not here);
        # what must hold is that every stall the loop saw is recorded, event and count alike,
        # and that the rig flags every rollout whose own timing did not hold
        assert events.count('"kind":"stall"') == m["uplink"]["stalls"], rid
        assert isinstance(m["timing_valid"], bool), rid
        if m["uplink"]["stalls"] or m["uplink"]["lateness_ms"]["p99"] > 5.0:
            assert m["timing_valid"] is False, (rid, m["rig_timing"])
        if m["timing_valid"]:  # verdicts only from rollouts whose own timing held
            assert not m["rig_timing"]["reasons"]
            verdicts.setdefault(m["item"], set()).add(m["pass"])
        else:
            assert m["rig_timing"]["reasons"], rid
            invalid.add(rid)
    assert set(manifest["timing_invalid"]) == invalid
    assert r.returncode == (3 if invalid else 0), r.stderr[-3000:]
    for rid in invalid:  # each one named, with why, where the user looks
        assert f"rig run: {rid}: the rig's own timing failed (" in r.stderr or len(invalid) > 20
    # how many held is the machine's capacity (bench/capacity.py measures it), not a property
    # this test can promise on a 2-core CI box: what must hold is that none is passed off
    print(f"{N - len(invalid)} of {N} rollouts ran with the rig's timing valid")
    # the reference system answers questions fast and yields to a barge-in (it has barge-in
    # on); it never backchannels, and it stops talking at a user "mhm" (energy barge-in)
    expected = {
        "turn_taking": True, "interruption": True, "backchannel": False, "user_backchannel": False
    }  # fmt: skip
    for item, verdict in expected.items():
        assert verdicts.get(item, {verdict}) == {verdict}, (item, verdicts)
    print(f"{N} rollouts at concurrency 50 in {wall_s:.1f} s")


def test_resume_after_sigkill_redoes_only_missing_or_failed(tmp_path: Path) -> None:
    sim, url = start_fleet_sim()
    try:
        proc = subprocess.Popen(
            run_cmd(url, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        rollouts = tmp_path / "fleet" / "rollouts"

        def five_done() -> set[str]:
            done = {p.parent.name for p in rollouts.glob("*/metrics.json")}
            return done if len(done) >= 5 else set()

        done = wait_for(five_done, timeout_s=90, every_s=0.2, what="5 rollouts done")
        assert 5 <= len(done) < N, f"{len(done)} done before the kill"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = {
            p.parent.name: (p.stat().st_mtime_ns, p.read_bytes())
            for p in rollouts.glob("*/metrics.json")
        }
        partial = {p.name for p in rollouts.iterdir()} - set(before)
        assert partial, "nothing was mid-run at the kill"
        r = subprocess.run(run_cmd(url, tmp_path), capture_output=True, text=True, timeout=180)
    finally:
        stop_sim(sim)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    skipped = set(re.findall(r"^(\S+): already done, skipped$", r.stderr, re.M))
    assert skipped == set(before)  # finished rollouts are not redone ...
    for rid, (mtime, raw) in before.items():
        p = rollouts / rid / "metrics.json"
        assert p.stat().st_mtime_ns == mtime and p.read_bytes() == raw
    redone = set(re.findall(r"^(\S+): start$", r.stderr, re.M))
    assert redone == rollout_ids() - set(before)  # ... the others are, and only once
    for rid in partial:  # the killed attempts are kept beside, not overwritten
        assert (rollouts / f"{rid}.failed-1").is_dir()
    manifest = json.loads((tmp_path / "fleet" / "manifest.json").read_text())
    assert manifest["status_counts"] == {"ok": N} and "resumed_from" in manifest
    for rid in rollout_ids():
        assert json.loads((rollouts / rid / "metrics.json").read_text())["status"] == "ok"
