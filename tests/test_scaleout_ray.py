"""`rig run --engine ray` on a real two-node Ray cluster against `rig sim`.

One cluster (two raylets on loopback, 2 declared CPUs each: one shard per node), one sim.
Run 1: shard 0's process is killed (SIGKILL) after its first rollouts (2 at once): its unfinished
rollouts end `error` / `node lost`, the other shard completes, the merged run says where
each rollout ran. Run 2, the same command: only the lost rollouts are redone, the set is
complete with no duplicates; statuses and per-item latencies match a local run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rig.analysis.aggregate import aggregate
from rig.shard import split
from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import wait_for

pytest.importorskip("ray")

from tests.support.raycluster import two_node_cluster  # noqa: E402  (after the skip)

IDS = [f"{i}-r{r}" for r in range(2) for i in ("what", "weather", "recipe")]
NOISE_MS = 25.0  # two runs of the same rollouts on one machine (see test_shard_e2e.py)


def _cmd(url: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "rig", "run", "builtin:demo", "--repeat", "2",
        "--target", url, "--out", str(out), "--run-id", "fleet", "--headless",
        "--drain-quiet-s", "0.4", *extra,
    ]  # fmt: skip


def _shard_pid(out: Path, label: str) -> int | None:
    """The pid of the shard process of this test's run (by its command line)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(out).encode() in argv and b"--shard" in argv and label.encode() in argv:
            if b"rig" in argv and b"run" in argv:
                return int(pid)
    return None


def _metrics(d: Path) -> dict:
    return json.loads((d / "metrics.json").read_text())


@pytest.mark.realtime
@pytest.mark.timeout(180)
def test_fleet_on_two_ray_nodes_loses_only_the_dead_shards_rollouts(tmp_path) -> None:
    out = tmp_path / "out"
    slices = split(IDS, 2)
    assert len(slices[0]) == 4  # shard 0 has rollouts left to lose after its first
    proc, url = start_sim("--latency-ms", "150", "--endpoint-silence-ms", "250", "--reply-s", "0.3")
    try:
        with two_node_cluster() as cluster:
            ray_args = ("--engine", "ray", "--ray-address", cluster.address, "--concurrency", "2")
            first = subprocess.Popen(
                _cmd(url, out, *ray_args),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            shard0 = out / "fleet-shard-0-of-2"
            wait_for(
                lambda: any((shard0 / "rollouts").glob("*/metrics.json")),
                timeout_s=60,
                what="shard 0's first rollout",
            )
            pid = wait_for(lambda: _shard_pid(out, "0/2"), timeout_s=5, what="shard 0's pid")
            os.kill(pid, signal.SIGKILL)
            log1, _ = first.communicate(timeout=90)
            assert first.returncode == 3, log1
            assert "node lost" in log1
            merged = out / "fleet"
            m1 = json.loads((merged / "manifest.json").read_text())
            statuses = {rid: _metrics(merged / "rollouts" / rid)["status"] for rid in IDS}
            lost = sorted(r for r in IDS if statuses[r] != "ok")
            assert lost and set(lost) <= set(slices[0]) and len(lost) < len(slices[0])
            for rid in lost:
                m = _metrics(merged / "rollouts" / rid)
                assert m["status"] == "error" and m["reason"].startswith("node lost"), m
            assert all(statuses[r] == "ok" for r in slices[1])
            shard_nodes = {s["shard"]: s["node"] for s in m1["engine"]["shards"]}
            assert len(set(shard_nodes.values())) == 2  # one shard per node: 2 CPUs each
            assert len(m1["engine"]["nodes"]) == 2
            for rid in IDS:
                k = 0 if rid in slices[0] else 1
                assert m1["rollout_nodes"][rid]["node"] == shard_nodes[f"{k}/2"]
                assert m1["rollout_nodes"][rid]["shard"] == f"{k}/2"

            second = subprocess.run(
                _cmd(url, out, *ray_args), capture_output=True, text=True, timeout=90
            )
            assert second.returncode == 0, second.stdout + second.stderr
        local = subprocess.run(
            _cmd(url, tmp_path / "local", "--concurrency", "3"),
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert local.returncode == 0, local.stderr
    finally:
        stop_sim(proc)
    names = sorted(os.listdir(merged / "rollouts"))
    assert names == sorted(IDS + [f"{rid}.failed-1" for rid in lost])  # no duplicates
    m2 = json.loads((merged / "manifest.json").read_text())
    assert m2["status"] == "done" and m2["merge"]["duplicates"] == {}
    a, b = aggregate(merged), aggregate(tmp_path / "local" / "fleet")
    assert a["status_counts"] == b["status_counts"] == {"ok": 6}
    assert a["retries"] == {rid: 1 for rid in lost}
    for ga, gb in zip(a["items"], b["items"], strict=True):
        assert ga["item"] == gb["item"] and ga["n"] == gb["n"] == 2
        for key in ("median", "min", "max"):
            assert ga["latency_ms"][key] == pytest.approx(gb["latency_ms"][key], abs=NOISE_MS)
