"""Is the rig's `timing_valid` flag right? Fleets against `rig sim --truth-log` at several
loads, each rollout's actual timing error against the truth (bench/selftruth.py), and the
flag's confusion matrix against "actually off by more than the tolerance".

    python bench/selfcheck.py run --grid 1:0:1 5:0:1 50:0:2 --rows rows.json   # N:HOGS:WORKERS
    python bench/selfcheck.py matrix rows.json            # recorded verdict, old and new rules
    python bench/selfcheck.py matrix rows.json --sweep    # the new rules at other thresholds

`run` appends one row per rollout to ROWS (a JSON list: config, load, the rig's verdict with
everything it recorded, the truth errors), so the grid can be split over several invocations
and any candidate criterion evaluated offline (`matrix`). Each grid point: HOGS busy Python
processes (`while 1: pass`, normal priority, killed afterwards), one `rig sim` (one process:
`--truth-log` needs one) and `rig run builtin:timing` with N rollouts (N < 5: `--shard 0/5`
of one repeat, so the first N items), `--concurrency N --workers W`, headless.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import selftruth  # noqa: E402

ITEMS = 5  # builtin:timing


@contextlib.contextmanager
def hogs(n: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def sim(truth_path: str) -> Iterator[str]:
    cmd = [sys.executable, "-m", "rig", "sim", "--port", "0", "--truth-log", truth_path]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"ws://\S+", line)
    try:
        if m is None:
            raise RuntimeError(f"rig sim did not start: {line!r}")
        yield m.group(0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_point(n: int, n_hogs: int, workers: int, tmp: str) -> tuple[list[dict[str, Any]], dict]:
    """One grid point: the rows of its rollouts and what the run was."""
    truth_path = os.path.join(tmp, "truth.jsonl")
    out = os.path.join(tmp, "out")
    repeat = max(1, n // ITEMS)
    shard = [] if n >= ITEMS else ["--shard", f"0/{ITEMS // n}"]
    info: dict[str, Any] = {"n": n, "hogs": n_hogs, "workers": workers}
    with hogs(n_hogs):
        time.sleep(1.0)  # the hogs are spinning
        info["load_before"] = [round(x, 2) for x in os.getloadavg()]
        with sim(truth_path) as url:
            cmd = [sys.executable, "-m", "rig", "run", "builtin:timing", "--target", url,
                   "--repeat", str(repeat), "--concurrency", str(n), "--workers", str(workers),
                   "--out", out, "--run-id", "r", "--headless", *shard]  # fmt: skip
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            info["wall_s"] = round(time.monotonic() - t0, 1)
            info["exit"] = r.returncode
        info["load_after"] = [round(x, 2) for x in os.getloadavg()]
    truth = selftruth.Truth(truth_path)
    rows = []
    for d in sorted(glob.glob(os.path.join(out, "r*", "rollouts", "*"))):
        if os.path.exists(os.path.join(d, "metrics.json")):
            rows.append({**info, **selftruth.rollout_row(d, truth)})
    info["rollouts"] = len(rows)
    info["flagged"] = sum(row["timing_valid"] is False for row in rows)
    return rows, info


def parse_point(spec: str) -> tuple[int, int, int]:
    n, h, w = (int(x) for x in spec.split(":"))
    return n, h, w


def cmd_run(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    if os.path.exists(args.rows):
        with open(args.rows, encoding="utf-8") as f:
            rows = json.load(f)
    machine = f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"
    for _ in range(args.times):
        for spec in args.grid:
            n, h, w = parse_point(spec)
            with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
                new, info = run_point(n, h, w, tmp)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for row in new:
                row["when"], row["machine"] = stamp, machine
            rows.extend(new)
            bad = sum(bool(r["truth"]) and bool(selftruth.actually_bad(r)) for r in new)
            print(
                f"{stamp} n={n} hogs={h} workers={w}: {info['rollouts']} rollouts, "
                f"{info['flagged']} flagged, {bad} actually off; exit {info['exit']}, "
                f"{info['wall_s']} s, load {info['load_before']} -> {info['load_after']}",
                flush=True,
            )
            with open(args.rows, "w", encoding="utf-8") as f:
                json.dump(rows, f)


def cmd_matrix(args: argparse.Namespace) -> None:
    with open(args.rows, encoding="utf-8") as f:
        rows = json.load(f)
    ok = [r for r in rows if r.get("truth") is not None and r.get("status") == "ok"]
    print(f"{len(rows)} rows, {len(ok)} ok rollouts matched to the truth")
    crit = {
        "recorded verdict": selftruth.recorded_flag,
        "old rules": selftruth.old_flag,
        "new rules": selftruth.new_flag,
    }
    if args.sweep:
        for fig in (2.0, 3.0, 4.0, 5.0, 6.0, 8.0):
            crit[f"new, figure > {fig} ms"] = lambda r, x=fig: selftruth.new_flag(r, figure_ms=x)
    result = {}
    print(f"{'criterion':28} {'TP':>5} {'FN':>5} {'FP':>5} {'TN':>5} {'false alarm':>12} {'miss':>8}")
    for name, flag in crit.items():
        mx = selftruth.matrix(ok, flag)
        result[name] = mx
        print(
            f"{name:28} {mx['flagged_bad']:5} {mx['missed_bad']:5} {mx['false_alarm']:5} "
            f"{mx['passed_good']:5} {_pct(mx['false_alarm_rate']):>12} {_pct(mx['miss_rate']):>8}"
        )
    print("\nby grid point (n, hogs, workers): rollouts, actually off, old flags, new flags")
    points: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for r in ok:
        points.setdefault((r["n"], r["hogs"], r["workers"]), []).append(r)
    for key in sorted(points):
        rs = points[key]
        bad = sum(bool(selftruth.actually_bad(r)) for r in rs)
        old = sum(selftruth.old_flag(r) for r in rs)
        new = sum(selftruth.recorded_flag(r) for r in rs)
        print(f"  {key}: {len(rs)}, off {bad}, old {old}, new {new}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run grid points, append rows")
    r.add_argument("--grid", nargs="+", required=True, help="N:HOGS:WORKERS ...")
    r.add_argument("--rows", required=True, help="JSON file the rows are appended to")
    r.add_argument("--times", type=int, default=1, help="run the grid this many times")
    m = sub.add_parser("matrix", help="confusion matrices from rows")
    m.add_argument("rows")
    m.add_argument("--sweep", action="store_true", help="the new rules at other thresholds")
    m.add_argument("--json", help="write the matrices here")
    args = ap.parse_args()
    {"run": cmd_run, "matrix": cmd_matrix}[args.cmd](args)


if __name__ == "__main__":
    main()
