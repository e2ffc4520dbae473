"""`rig run --engine ray` on a real two-node Ray cluster against `rig sim`.

One cluster (two raylets on loopback, 2 declared CPUs each: one shard per node), one sim.
Both ways results travel (`--results auto`: the shared --out; `object-store`: through Ray,
rollout by rollout). Run 1: the second node is removed (Ray kills its raylet and workers;
the shard process dies with its worker) once its shard has finished a rollout: its unfinished
rollouts end `error` / `node lost`, the other shard completes, the merged run says where
each rollout ran. Run 2, the same command: only the lost rollouts are redone, the set is
complete with no duplicates (the one node left runs both shards in turn); statuses and
per-item latencies match a local run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rig.analysis.aggregate import aggregate
from rig.shard import split
from tests.support.runexit import assert_run_ok
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


def _metrics(d: Path) -> dict:
    return json.loads((d / "metrics.json").read_text())


def _shard_on(out: Path, node_id: str) -> int | None:
    """The shard running on `node_id` once it has finished a rollout (its manifest says
    where it runs: the engine passes the node id)."""
    for k in (0, 1):
        d = out / f"fleet-shard-{k}-of-2"
        try:
            node = json.loads((d / "manifest.json").read_text()).get("node")
        except (OSError, ValueError):
            continue
        if node == node_id and any((d / "rollouts").glob("*/metrics.json")):
            return k
    return None


@pytest.mark.realtime
@pytest.mark.timeout(180)
@pytest.mark.parametrize("results", ["auto", "object-store"])
def test_fleet_on_two_ray_nodes_loses_only_the_dead_nodes_rollouts(tmp_path, results) -> None:
    out = tmp_path / "out"
    slices = split(IDS, 2)
    proc, url = start_sim("--latency-ms", "150", "--endpoint-silence-ms", "250", "--reply-s", "0.3")
    try:
        with two_node_cluster() as cluster:
            worker = next(n for n in cluster.list_all_nodes() if n is not cluster.head_node)
            ray_args = ("--engine", "ray", "--ray-address", cluster.address, "--results", results)
            first = subprocess.Popen(
                _cmd(url, out, *ray_args),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            k = wait_for(
                lambda: _shard_on(out, worker.node_id),
                timeout_s=60,
                what="the worker node's shard to finish a rollout",
            )
            cluster.remove_node(worker)  # raylet, workers and (parent-death signal) the shard
            log1, _ = first.communicate(timeout=90)
            assert first.returncode == 3, log1
            assert "node lost: NodeDiedError" in log1
            merged = out / "fleet"
            m1 = json.loads((merged / "manifest.json").read_text())
            statuses = {rid: _metrics(merged / "rollouts" / rid)["status"] for rid in IDS}
            lost = sorted(r for r in IDS if statuses[r] != "ok")
            assert lost and set(lost) <= set(slices[k]) and len(lost) < len(slices[k])
            for rid in lost:
                m = _metrics(merged / "rollouts" / rid)
                assert m["status"] == "error" and m["reason"].startswith("node lost"), m
            assert all(statuses[r] == "ok" for r in slices[1 - k])
            shard_nodes = {s["shard"]: s["node"] for s in m1["engine"]["shards"]}
            assert shard_nodes[f"{k}/2"] == worker.node_id
            assert len(set(shard_nodes.values())) == 2  # one shard per node: 2 CPUs each
            assert len(m1["engine"]["nodes"]) == 2
            # auto: this machine's --out is shared; object-store: what ended came back
            # through Ray before the node died, so only its unfinished rollouts are lost
            want = "shared" if results == "auto" else "object-store"
            assert m1["engine"]["shards"][1 - k]["results"] == want
            for rid in IDS:
                j = 0 if rid in slices[0] else 1
                assert m1["rollout_nodes"][rid]["node"] == shard_nodes[f"{j}/2"]
                assert m1["rollout_nodes"][rid]["shard"] == f"{j}/2"
            # the same command on what is left (one node): the same 2-way split, queued
            second = subprocess.run(
                _cmd(url, out, *ray_args), capture_output=True, text=True, timeout=90
            )
            assert_run_ok(second.returncode, second.stdout + second.stderr, out / "fleet")
        local = subprocess.run(
            _cmd(url, tmp_path / "local", "--concurrency", "3"),
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert_run_ok(local.returncode, local.stderr, tmp_path / "local" / "fleet")
    finally:
        stop_sim(proc)
    names = sorted(os.listdir(merged / "rollouts"))
    assert names == sorted(IDS + [f"{rid}.failed-1" for rid in lost])  # no duplicates
    m2 = json.loads((merged / "manifest.json").read_text())
    assert m2["status"] == "done" and m2["merge"]["duplicates"] == {}
    # measurements compared with any rollout the rig flagged for its own timing kept in
    a = aggregate(merged, include_invalid_timing=True)
    b = aggregate(tmp_path / "local" / "fleet", include_invalid_timing=True)
    assert a["status_counts"] == b["status_counts"] == {"ok": 6}
    assert a["retries"] == {rid: 1 for rid in lost}
    for ga, gb in zip(a["items"], b["items"], strict=True):
        assert ga["item"] == gb["item"] and ga["n"] == gb["n"] == 2
        for key in ("median", "min", "max"):
            assert ga["latency_ms"][key] == pytest.approx(gb["latency_ms"][key], abs=NOISE_MS)
