"""`rig run --workers N`: rollouts sharded over worker processes into one run directory, one
merged manifest, workers that die with the parent, resume across workers; and the pieces."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rig import workers
from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import wait_for

ITEMS = ("pause", "turn_taking", "backchannel", "interruption", "user_backchannel")


def test_shards_cover_every_rollout_once_and_shares_add_up() -> None:
    items = [f"r{i}" for i in range(11)]
    parts = [workers.shard(items, k, 3) for k in range(3)]
    assert sorted(sum(parts, [])) == sorted(items) and parts[0][:2] == ["r0", "r3"]
    assert [workers.share(10, k, 3) for k in range(3)] == [4, 3, 3]
    assert sum(workers.share(50, k, 4) for k in range(4)) == 50
    assert workers.share(1, 1, 2) == 1  # a worker never gets 0 (it would never start one)


def test_merge_sums_the_workers_and_names_a_missing_one(tmp_path: Path) -> None:
    for k, (rid, status) in enumerate([("a", "ok"), ("b", "transport_error")]):
        m = {"run_id": "x", "status": "done", "config": {"concurrency": 1, "scenario": "s"},
             "rollouts": {rid: {}}, "status_counts": {status: 1}, "targets": [{"url": "u"}],
             "timing_invalid": [rid] if k else [], "scheduling": {"policy": f"p{k}"}}  # fmt: skip
        (tmp_path / workers.worker_manifest_name(k)).write_text(json.dumps(m))
    merged = workers.merge(str(tmp_path), 2, {"concurrency": 8}, [11, 12])
    assert merged["status"] == "done" and set(merged["rollouts"]) == {"a", "b"}
    assert merged["status_counts"] == {"ok": 1, "transport_error": 1}
    assert merged["timing_invalid"] == ["b"] and merged["targets"] == [{"url": "u"}]
    assert merged["config"] == {"concurrency": 8, "scenario": "s"}
    assert merged["workers"]["pids"] == [11, 12]
    assert [s["policy"] for s in merged["workers"]["scheduling"]] == ["p0", "p1"]
    three = workers.merge(str(tmp_path), 3, {})
    assert three["status"] == "interrupted" and three["workers"]["missing"] == [2]


def run_cmd(url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rig", "run", "builtin:timing", "--target", url,
            "--out", str(out), "--run-id", "w", "--headless", "--concurrency", "10",
            "--repeat", "2", "--workers", "2", *extra]  # fmt: skip


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.realtime
def test_two_workers_share_one_run_die_with_the_parent_and_resume(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "1", "--latency-ms", "300")
    ids = {f"{item}-r{k}" for item in ITEMS for k in range(2)}
    try:
        proc = subprocess.Popen(run_cmd(url, tmp_path), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        rollouts = tmp_path / "w" / "rollouts"

        def two_workers() -> list[int]:
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
            pids = [int(x) for x in out.stdout.split()]
            return pids if len(pids) == 2 else []

        pids = wait_for(two_workers, timeout_s=30, every_s=0.1, what="two workers")
        wait_for(lambda: len(list(rollouts.glob("*"))) >= 4, timeout_s=60, every_s=0.1,
                 what="rollouts started")  # fmt: skip
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not any(alive(p) for p in pids), timeout_s=10, every_s=0.1,
                 what="workers gone with their parent")  # fmt: skip
        done = {p.parent.name for p in rollouts.glob("*/metrics.json")}
        assert len(done) < 10
        r = subprocess.run(run_cmd(url, tmp_path), capture_output=True, text=True, timeout=180)
    finally:
        stop_sim(sim)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    skipped = set(re.findall(r"^(\S+): already done, skipped$", r.stderr, re.M))
    redone = set(re.findall(r"^(\S+): start$", r.stderr, re.M))
    assert skipped == done and redone == ids - done  # each rollout once, across workers
    run = tmp_path / "w"
    shards = [json.loads((run / workers.worker_manifest_name(k)).read_text()) for k in (0, 1)]
    assert not set(shards[0]["rollouts"]) & set(shards[1]["rollouts"])
    assert set(shards[0]["rollouts"]) | set(shards[1]["rollouts"]) == ids
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["status_counts"] == {"ok": 10}
    assert manifest["config"]["concurrency"] == 10 and manifest["workers"]["n"] == 2
    assert len(set(manifest["workers"]["pids"])) == 2
    invalid = {rid for rid in ids
               if json.loads((run / "rollouts" / rid / "metrics.json").read_text())[
                   "timing_valid"] is False}  # fmt: skip
    assert set(manifest["timing_invalid"]) == invalid
    assert r.returncode == (3 if invalid else 0)
    assert "run directory:" in r.stdout  # one summary, from the parent


@pytest.mark.realtime
def test_sim_workers_share_one_port_and_die_with_the_parent(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "0.3", "--workers", "2")
    try:
        out = subprocess.run(["pgrep", "-P", str(sim.pid)], capture_output=True, text=True)
        (worker,) = [int(x) for x in out.stdout.split()]
        wav = str(Path(__file__).resolve().parents[1] / "rig" / "data" / "turn_what.wav")
        r = subprocess.run(
            [sys.executable, "-m", "rig", "run", wav, "--target", url, "--out", str(tmp_path),
             "--run-id", "s", "--headless", "--repeat", "12", "--concurrency", "12",
             "--drain-quiet-s", "0.5"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode in (0, 3), r.stderr[-2000:]
        manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
        assert manifest["status_counts"] == {"ok": 12}
    finally:
        stop_sim(sim)
    assert sim.stdout is not None
    text = sim.stdout.read()
    served = [int(n) for n in re.findall(r"rig sim stopped after (\d+) connections", text)]
    assert len(served) == 2 and sum(served) == 12, text  # both processes served
    assert min(served) >= 1, served  # the kernel spread them (12 on one: p = 2**-11)
    wait_for(lambda: not alive(worker), timeout_s=10, every_s=0.1, what="worker stopped")


def test_a_killed_sim_parent_takes_its_workers_along() -> None:
    sim, _ = start_sim("--workers", "2")
    out = subprocess.run(["pgrep", "-P", str(sim.pid)], capture_output=True, text=True)
    (worker,) = [int(x) for x in out.stdout.split()]
    os.kill(sim.pid, signal.SIGKILL)
    sim.wait()
    wait_for(lambda: not alive(worker), timeout_s=10, every_s=0.1, what="worker gone")


def test_sim_workers_refuse_what_they_cannot_shard(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rig", "sim", "--workers", "2", "--truth-log", str(tmp_path / "t")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "--truth-log needs --workers 1" in r.stderr
