"""The same fleet locally and on a two-node Ray cluster on this machine, side by side.

    python bench/scaleout.py --repeat 4 --reps 3

One `rig sim` and one two-node Ray cluster (tests/support/raycluster.py: two raylets on
loopback, 2 declared CPUs each, 100 MB object stores) serve every run; the modes alternate
within each rep so load drifts hit both:

  local   rig run builtin:demo --repeat R --concurrency 2
  ray     rig run builtin:demo --repeat R --engine ray --ray-address A (2 shards, one per
          node, --concurrency 1 each: the same 2 rollouts in flight); results through the
          shared --out (auto finds it), the driver's fleet view fed over TCP
  ray-obj the same with --results object-store: each rollout packed as it ends and sent
          through Ray's object store to the driver

Per run: start-up (the bench's launch to the first rollout's `session.start`, both on this
machine's CLOCK_MONOTONIC: one host, so comparable), wall time, per-rollout overhead (per
process: its slots x (last `session.end` - first `session.start`) minus the time its
rollouts streamed, summed and divided by the rollouts: the gaps between rollouts, without
start-up or the tail of an unevenly filled shard), tear-down (last `session.end` to the
command's exit: analysis, merge, Ray shutdown), rollouts per process (hash slices are uneven
for small runs) and uplink send lateness p99 over every frame of every rollout (chunks.jsonl
`t_ns - t_sched_ns`). Reported: mean and half-range over reps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.raycluster import two_node_cluster  # noqa: E402
from tests.support.simproc import start_sim, stop_sim  # noqa: E402


def _events(d: Path) -> dict[str, int]:
    out = {}
    for line in (d / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("kind") in ("session.start", "session.end"):
            out[e["kind"]] = e["t_ns"]
    return out


def one_run(url: str, out: Path, repeat: int, ray_address: str | None, mode: str) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "rig", "run", "builtin:demo", "--repeat", str(repeat),
        "--target", url, "--out", str(out), "--run-id", "b", "--headless",
        "--drain-quiet-s", "0.5",
    ]  # fmt: skip
    if ray_address:
        cmd += ["--engine", "ray", "--ray-address", ray_address, "--concurrency", "1"]
        cmd += ["--results", "object-store" if mode == "ray-obj" else "auto"]
    else:
        cmd += ["--concurrency", "2"]
    t_launch = time.monotonic_ns()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall_ns = time.monotonic_ns() - t_launch
    if r.returncode not in (0, 3):  # 3: a rollout's own timing flagged (load): still measured
        raise SystemExit(f"run failed ({r.returncode}): {r.stderr[-2000:]}")
    run_dir = out / "b" / "rollouts"
    spans: dict[str, list[tuple[int, int]]] = {}  # process (shard) -> (start, end) per rollout
    late: list[int] = []
    for d in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        ev = _events(d)
        shard = json.loads((d / "metrics.json").read_text()).get("shard") or "local"
        spans.setdefault(shard, []).append((ev["session.start"], ev["session.end"]))
        for line in (d / "chunks.jsonl").read_text().splitlines():
            c = json.loads(line)
            if c["dir"] == "up":
                late.append(c["t_ns"] - c["t_sched_ns"])
    every = [x for v in spans.values() for x in v]
    n = len(every)
    idle_ns = 0.0  # per process: slots x (last end - first start) - time spent streaming
    for v in spans.values():
        slots = 2 if ray_address is None else 1
        span = max(e for _, e in v) - min(s for s, _ in v)
        idle_ns += slots * span - sum(e - s for s, e in v)
    t_end = t_launch + wall_ns
    return {
        "n": n,
        "per_process": sorted(len(v) for v in spans.values()),
        "startup_s": (min(s for s, _ in every) - t_launch) / 1e9,
        "wall_s": wall_ns / 1e9,
        "overhead_per_rollout_s": idle_ns / n / 1e9,
        "teardown_s": (t_end - max(e for _, e in every)) / 1e9,
        "lateness_p99_ms": float(np.percentile(late, 99)) / 1e6,
        "stalls": int(sum(1 for x in late if x > 20e6)),
    }


KEYS = ("startup_s", "wall_s", "overhead_per_rollout_s", "teardown_s", "lateness_p99_ms")


def summarize(runs: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for key in KEYS:
        v = np.array([r[key] for r in runs])
        out[key] = f"{v.mean():.2f} ± {(v.max() - v.min()) / 2:.2f}"
    out["stalls"] = str(sum(r["stalls"] for r in runs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=4, help="builtin:demo repeats (3 items each)")
    ap.add_argument("--reps", type=int, default=3, help="rounds of local, ray, ray-obj")
    args = ap.parse_args()
    proc, url = start_sim("--latency-ms", "150", "--endpoint-silence-ms", "250", "--reply-s", "0.3")
    modes = ("local", "ray", "ray-obj")
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    t0 = time.monotonic()
    try:
        with two_node_cluster() as cluster:
            cluster_up_s = time.monotonic() - t0
            with tempfile.TemporaryDirectory(prefix="rig-bench-scaleout-") as tmp:
                for rep in range(args.reps):
                    for mode in modes[rep % 3 :] + modes[: rep % 3]:  # rotated per rep
                        addr = None if mode == "local" else cluster.address
                        r = one_run(url, Path(tmp) / f"{mode}{rep}", args.repeat, addr, mode)
                        results[mode].append(r)
                        print(mode, rep, json.dumps(r), flush=True)
    finally:
        stop_sim(proc)
    print(
        f"\nmachine: {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; "
        f"two-node Ray cluster up in {cluster_up_s:.1f} s; {args.reps} reps, "
        f"{results['local'][0]['n']} rollouts per run; mean ± half-range over reps"
    )
    rows = {m: summarize(rs) for m, rs in results.items()}
    print(f"{'':26}" + "".join(f"{m:>18}" for m in modes))
    print(
        f"{'rollouts per process':26}"
        + "".join(f"{str(results[m][0]['per_process']):>18}" for m in modes)
    )
    for key in (*KEYS, "stalls"):
        print(f"{key:26}" + "".join(f"{rows[m][key]:>18}" for m in modes))


if __name__ == "__main__":
    main()
