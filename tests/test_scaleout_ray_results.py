"""`rig run --engine ray` on a real two-node Ray cluster: the driver's own view of every
shard, and results through Ray's object store.

One cluster (two raylets on loopback, 2 CPUs each: one shard per node, each node with a
staging directory of its own), one sim, three runs of the same 6 rollouts:
1. `--results auto`, headless: every node sees the driver's --out (the marker with its
   nonce), so results go through the shared path; the driver prints the same lines as a
   local run, for every shard's rollouts, from the shards' telemetry.
2. `--results object-store` into another --out: each shard runs in its node's staging
   directory and its rollouts come back through the object store; the merged run equals run
   1's in ids, statuses and per-item latencies (within noise), and nothing staged is left.
3. on a terminal: the driver's live view draws every shard's rollouts, to its final frame.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig.analysis.aggregate import aggregate
from tests.support.ptyterm import Pty
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

pytest.importorskip("ray")

from tests.support.raycluster import two_node_cluster  # noqa: E402  (after the skip)

pytestmark = pytest.mark.realtime
IDS = [f"{i}-r{r}" for r in range(2) for i in ("what", "weather", "recipe")]
NOISE_MS = 25.0  # two runs of the same rollouts on one machine (see test_shard_e2e.py)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    base = tmp_path_factory.mktemp("rayresults")
    staging = (base / "node-head", base / "node-2")
    env = ({"RIG_SHARD_STAGING": str(staging[0])}, {"RIG_SHARD_STAGING": str(staging[1])})
    sim, url = start_sim("--latency-ms", "150", "--endpoint-silence-ms", "250", "--reply-s", "0.3")
    try:
        with two_node_cluster(env=env) as cluster:
            yield cluster.address, url, base
    finally:
        stop_sim(sim)


def _cmd(address: str, url: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "rig", "run", "builtin:demo", "--repeat", "2",
        "--target", url, "--out", str(out), "--run-id", "fleet", "--drain-quiet-s", "0.4",
        "--engine", "ray", "--ray-address", address, *extra,
    ]  # fmt: skip


def _shards(run: Path) -> list[dict]:
    return json.loads((run / "manifest.json").read_text())["engine"]["shards"]


@pytest.mark.timeout(240)
def test_object_store_results_equal_shared_ones_and_the_driver_sees_every_shard(fleet) -> None:
    address, url, base = fleet
    shared = subprocess.run(
        _cmd(address, url, base / "shared", "--headless", "--progress-interval-s", "1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = shared.stdout + shared.stderr
    assert_run_ok(shared.returncode, log, base / "shared" / "fleet")
    # the driver's own lines, from the shards' telemetry: every rollout with its shard
    lines = shared.stderr.splitlines()
    for rid in IDS:
        assert any(ln.startswith(f"{rid}: ok [shard ") for ln in lines), shared.stderr
    assert {ln.split("[shard ")[1] for ln in lines if "[shard " in ln} == {"0/2]", "1/2]"}
    assert any(ln.startswith("progress: ") and "/6 rollouts done" in ln for ln in lines)
    assert "progress: 0/6" in shared.stderr  # the fleet's total, from the start
    s1 = _shards(base / "shared" / "fleet")
    assert [s["results"] for s in s1] == ["shared", "shared"]  # auto: the same file system
    assert not list((base / "shared").glob(".rig-results-check-*"))  # the marker is removed
    view = json.loads((base / "shared" / "fleet" / "manifest.json").read_text())["engine"]
    assert view["fleet_view"]["listen"].startswith("127.0.0.1:")
    assert view["fleet_view"]["events"] > 0 and view["fleet_view"]["refused"] == 0

    obj = subprocess.run(
        _cmd(address, url, base / "obj", "--headless", "--results", "object-store"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_run_ok(obj.returncode, obj.stdout + obj.stderr, base / "obj" / "fleet")
    s2 = _shards(base / "obj" / "fleet")
    assert [s["results"] for s in s2] == ["object-store", "object-store"]
    roots = sorted(str(Path(s["staging"]).parent) for s in s2)
    assert roots == sorted(str(base / n) for n in ("node-head", "node-2"))  # one per node
    assert not [s for s in s2 if os.path.exists(s["staging"])]  # staging removed
    assert sum(s["transfer"]["rollouts"] for s in s2) == 6
    for name in ("shared", "obj"):
        assert sorted(os.listdir(base / name / "fleet" / "rollouts")) == sorted(IDS)
    for k in range(2):
        assert not (base / "obj" / f"fleet-shard-{k}-of-2" / ".incoming").exists()
    a = aggregate(base / "obj" / "fleet", include_invalid_timing=True)
    b = aggregate(base / "shared" / "fleet", include_invalid_timing=True)
    assert a["status_counts"] == b["status_counts"] == {"ok": 6}
    for ga, gb in zip(a["items"], b["items"], strict=True):
        assert ga["item"] == gb["item"] and ga["n"] == gb["n"] == 2
        for key in ("median", "min", "max"):
            assert ga["latency_ms"][key] == pytest.approx(gb["latency_ms"][key], abs=NOISE_MS)
    report = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(base / "obj" / "fleet"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode in (0, 3), report.stderr
    assert json.loads(report.stdout)["status_counts"] == {"ok": 6}


@pytest.mark.timeout(180)
async def test_the_drivers_live_view_draws_every_shards_rollouts(fleet) -> None:
    address, url, base = fleet
    term = Pty(140, 45)
    try:
        proc = await asyncio.create_subprocess_exec(
            *_cmd(address, url, base / "view"),
            cwd=REPO,
            stdin=term.slave,
            stdout=term.slave,
            stderr=term.slave,
        )
        await term.wait_for("rig · fleet", 60)  # the view is up on the driver's terminal
        screen = await term.wait_for("merged into", 150)  # the view closed, then the summary
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        term.close()
    assert "Traceback" not in screen
    assert code in (0, 3), screen
    assert "6/6 done" in screen and "all done" in screen, screen[-6000:]  # its final frame
    for rid in IDS:
        assert rid in screen, screen


def test_the_ray_engine_runs_from_python_too(fleet, tmp_path: Path) -> None:
    """`rig.run(..., engine="ray")`: the shards get the run's config as JSON (no command line
    to re-run), so a run built from keywords shards and merges as `rig run --engine ray`."""
    address, url, _ = fleet
    script = (
        "import json, sys, rig\n"
        "r = rig.run('builtin:demo', target=sys.argv[1], out=sys.argv[2], run_id='py',\n"
        "            engine='ray', ray_address=sys.argv[3], shards=2, repeat=2,\n"
        "            drain_quiet_s=0.4, headless=True)\n"
        "print(json.dumps({'statuses': r.statuses, 'code': r.exit_code}))\n"
    )
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-c", script, url, str(out), address],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(got["statuses"]) == sorted(IDS)
    assert set(got["statuses"].values()) == {"ok"}
    manifest = json.loads((out / "py" / "manifest.json").read_text())
    assert manifest["engine"]["name"] == "ray" and len(manifest["engine"]["shards"]) == 2
    assert manifest["config"]["command"] == "run" and manifest["config"]["scenario"] == (
        "builtin:demo"
    )
