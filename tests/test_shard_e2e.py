"""`rig run --shard K/N` x3 + `rig merge` against `rig sim` == one unsharded run.

Real processes on loopback: one `rig sim`, three shard runs at once (one of them empty:
the hash gives `builtin:demo`'s three items to shards 1 and 2), one unsharded run, then the
merge. Same rollout ids and statuses; the report's structure equal and every latency figure
within the rig's noise of the unsharded run's (the sim's reply delay is fixed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rig.analysis.aggregate import aggregate
from rig.shard import split
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

ITEMS = ["what", "weather", "recipe"]
#: two runs of the same rollouts on one machine: latency figures agree within this (the
#: sim's delay is fixed; the rest is loop jitter and onset detection on 20 ms frames)
NOISE_MS = 25.0


def _rig_run(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rig",
            "run",
            "builtin:demo",
            "--target",
            url,
            "--out",
            str(out),
            "--headless",
            "--drain-quiet-s",
            "0.6",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(p: subprocess.Popen[str], run_dir: Path) -> str:
    out, _ = p.communicate(timeout=90)
    assert_run_ok(p.returncode, out, run_dir)
    return out


def _measurements(report: Any) -> Any:
    """The report without the rig's verdicts on its own timing (timing_valid/timing_invalid)."""
    if isinstance(report, dict):
        return {
            k: _measurements(v)
            for k, v in report.items()
            if k not in ("timing_valid", "timing_invalid")
        }
    if isinstance(report, list):
        return [_measurements(v) for v in report]
    return report


def _close(a: Any, b: Any, path: str = "") -> None:
    """Same structure and exact ints/strings; floats within NOISE_MS."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):  # bootstrap intervals are tuples in-process
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b == pytest.approx(a, abs=NOISE_MS), path
    else:
        assert a == b, path


@pytest.mark.realtime
def test_three_shards_merged_equal_one_unsharded_run(tmp_path) -> None:
    assert split(ITEMS, 3)[0] == []  # shard 0 of 3 is empty: that must work too
    proc, url = start_sim("--latency-ms", "250", "--endpoint-silence-ms", "300", "--reply-s", "0.4")
    out = tmp_path / "out"
    shard2 = out / "r-shard-2-of-3"
    try:
        shards = [_rig_run(url, out, "--run-id", "r", "--shard", f"{k}/3") for k in range(3)]
        for p in shards:
            _finish(p, out / f"r-shard-{shards.index(p)}-of-3")
        _finish(_rig_run(url, out, "--run-id", "one", "--concurrency", "3"), out / "one")
        # a shard rerun redoes the same rollouts: all done, all skipped
        again = _finish(_rig_run(url, out, "--run-id", "r", "--shard", "2/3"), shard2)
        assert sorted(again.count(f"{i}: already done") for i in split(ITEMS, 3)[2]) == [1, 1]
        # ... and resume works per shard: a rollout without metrics is redone, only it
        lost = split(ITEMS, 3)[2][0]
        os.remove(out / "r-shard-2-of-3" / "rollouts" / lost / "metrics.json")
        again = _finish(_rig_run(url, out, "--run-id", "r", "--shard", "2/3"), shard2)
        assert f"{lost}: start" in again and again.count(": start") == 1
    finally:
        stop_sim(proc)
    shard_dirs = [str(out / f"r-shard-{k}-of-3") for k in range(3)]
    for k, d in enumerate(shard_dirs):
        assert sorted(os.listdir(Path(d) / "rollouts")) == sorted(
            split(ITEMS, 3)[k] + ([f"{lost}.failed-1"] if k == 2 else [])
        )
        m = json.loads((Path(d) / "manifest.json").read_text())
        assert m["shard"]["label"] == f"{k}/3" and m["status"] == "done"
    merged = out / "merged"
    r = subprocess.run(
        [sys.executable, "-m", "rig", "merge", str(merged), *shard_dirs],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(merged / "rollouts")) == sorted([*ITEMS, f"{lost}.failed-1"])
    manifest = json.loads((merged / "manifest.json").read_text())
    for rid in ITEMS:
        metrics = json.loads((merged / "rollouts" / rid / "metrics.json").read_text())
        k = split(ITEMS, 3).index(next(p for p in split(ITEMS, 3) if rid in p))
        assert metrics["shard"] == f"{k}/3" and metrics["host"] and metrics["node"]
        assert manifest["rollout_nodes"][rid]["shard"] == f"{k}/3"
    one = json.loads((out / "one" / "rollouts" / "what" / "metrics.json").read_text())
    assert one["shard"] is None and one["node"] == one["host"]
    # the measurements must agree; whether the rig's own timing held on this shared box is
    # each run's own verdict (tests/support/runexit.py), so flagged rollouts are kept in and
    # the verdict counts left out of the comparison
    a = _measurements(aggregate(merged, include_invalid_timing=True))
    b = _measurements(aggregate(out / "one", include_invalid_timing=True))
    assert a["retries"] == {lost: 1}  # the moved-aside attempt came along
    for report in (a, b):
        for key in ("run_dir", "run_id", "retries"):
            report.pop(key)
    assert a["status_counts"] == {"ok": 3}
    _close(a, b)
