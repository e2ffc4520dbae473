"""Is the rig's `timing_valid` flag right? Fleets against `rig sim --truth-log` at several
loads, each rollout's actual timing error against the truth (bench/selftruth.py), and the
flag's confusion matrix against "actually off by more than the tolerance".

    python bench/selfcheck.py run --grid 1:0:1 5:0:1 50:0:auto --rows rows.json   # N:HOGS:WORKERS
    python bench/selfcheck.py matrix rows.json            # recorded verdict, old and new rules
    python bench/selfcheck.py matrix rows.json --sweep    # the new rules at other thresholds

`run` appends one row per rollout to ROWS (a JSON list: config, load, the rig's verdict with
everything it recorded, the truth errors), so the grid can be split over several invocations
and any candidate criterion evaluated offline (`matrix`). Each grid point: HOGS busy Python
processes (`while 1: pass`, normal priority, killed afterwards), RTHOGS bursty real-time ones
(RT_HOG: another loop at the rig's SCHED_FIFO priority), one `rig sim` (one process:
`--truth-log` needs one) and `rig run builtin:timing` with N rollouts (N < 5: `--shard 0/5`
of one repeat, so the first N items), `--concurrency N --workers W`, headless.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import gzip
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


#: another real-time loop on the machine (the stall cause docs/pacing.md traced): SCHED_FIFO
#: at the rig's own priority, busy 1-10 ms (uniform) out of every 25 ms; equal FIFO
#: priorities do not preempt each other, so the rig's loop waits until the burst ends
RT_HOG = """
import os, random, time
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(3))
while True:
    busy = random.uniform(0.001, 0.010)
    t = time.monotonic()
    while time.monotonic() - t < busy:
        pass
    time.sleep(0.025 - busy)
"""


@contextlib.contextmanager
def hogs(n: int, rt: int = 0) -> Iterator[None]:
    """`n` busy processes at normal priority and `rt` real-time bursty ones (RT_HOG)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    procs += [subprocess.Popen([sys.executable, "-c", RT_HOG]) for _ in range(rt)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def sim(truth_path: str, rt_priority: int) -> Iterator[str]:
    cmd = [sys.executable, "-m", "rig", "sim", "--port", "0", "--truth-log", truth_path,
           "--rt-priority", str(rt_priority)]  # fmt: skip
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


def run_point(
    n: int,
    n_hogs: int,
    workers: int,
    rt_hogs: int,
    rt_priority: int,
    tmp: str,
    rig_args: tuple[str, ...] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One grid point: the rows of its rollouts and what the run was."""
    truth_path = os.path.join(tmp, "truth.jsonl")
    out = os.path.join(tmp, "out")
    repeat = max(1, n // ITEMS)
    shard = [] if n >= ITEMS else ["--shard", f"0/{ITEMS // n}"]
    info: dict[str, Any] = {
        "n": n, "hogs": n_hogs, "workers": workers, "rt_hogs": rt_hogs, "rt_priority": rt_priority,
        "rig_args": list(rig_args),
    }  # fmt: skip
    with hogs(n_hogs, rt_hogs):
        time.sleep(1.0)  # the hogs are spinning
        info["load_before"] = [round(x, 2) for x in os.getloadavg()]
        with sim(truth_path, rt_priority) as url:
            cmd = [sys.executable, "-m", "rig", "run", "builtin:timing", "--target", url,
                   "--repeat", str(repeat), "--concurrency", str(n),
                   "--workers", str(workers) if workers else "auto",
                   "--rt-priority", str(rt_priority),
                   "--out", out, "--run-id", "r", "--headless", *shard, *rig_args]  # fmt: skip
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


def parse_point(spec: str) -> tuple[int, int, int, int, int]:
    """N:HOGS:WORKERS[:RTHOGS[:RTPRIO]]: WORKERS 0 or `auto` for `--workers auto` (the
    default), RTPRIO the `--rt-priority` of the rig and the sim (default 3; 0: normal
    scheduling, as where SCHED_FIFO is not permitted)."""
    n, h, w, *more = spec.split(":")
    rt = int(more[0]) if more else 0
    prio = int(more[1]) if len(more) > 1 else 3
    return int(n), int(h), 0 if w == "auto" else int(w), rt, prio


def load_rows(path: str) -> list[dict[str, Any]]:
    """Rows from a JSON list (gzipped when the name ends in .gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows: list[dict[str, Any]] = json.load(f)
    return rows


def save_rows(path: str, rows: list[dict[str, Any]]) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        json.dump(rows, f)


def cmd_run(args: argparse.Namespace) -> None:
    rows = load_rows(args.rows) if os.path.exists(args.rows) else []
    machine = f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"
    for _ in range(args.times):
        for spec in args.grid:
            n, h, w, rt, prio = parse_point(spec)
            with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
                new, info = run_point(n, h, w, rt, prio, tmp, tuple(args.rig_arg or ()))
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for row in new:
                row["when"], row["machine"] = stamp, machine
            rows.extend(new)
            bad = sum(bool(r["truth"]) and bool(selftruth.actually_bad(r)) for r in new)
            print(
                f"{stamp} {spec}: {info['rollouts']} rollouts, "
                f"{info['flagged']} flagged, {bad} actually off; exit {info['exit']}, "
                f"{info['wall_s']} s, load {info['load_before']} -> {info['load_after']}",
                flush=True,
            )
            save_rows(args.rows, rows)


def cmd_matrix(args: argparse.Namespace) -> None:
    rows = [r for path in args.rows for r in load_rows(path)]
    ok = [r for r in rows if r.get("truth") is not None and r.get("status") == "ok"]
    print(f"{len(rows)} rows, {len(ok)} ok rollouts matched to the truth")
    crit = {
        "recorded verdict": selftruth.recorded_flag,
        "old rules": selftruth.old_flag,
        "new rules": selftruth.new_flag,
    }
    if args.sweep:
        for fig in (4.0, 6.0, 8.0):
            crit[f"new, figure > {fig} ms"] = lambda r, x=fig: selftruth.new_flag(r, figure_ms=x)
        for w in ((10.0, 10.0), (0.0, 5.0), (1.0, 2.0), (2.0, 10.0)):
            crit[f"new, window -{w[0]:g}/+{w[1]:g} ms"] = lambda r, w=w: selftruth.new_flag(
                r, window=w
            )
        crit["new, no decision frames"] = lambda r: selftruth.new_flag(r, decision=False)
    result = {}
    head = f"{'TP':>5} {'FN':>5} {'FP':>5} {'TN':>5} {'false alarm':>12} {'miss':>8}"
    print(f"{'criterion':28} {head}")
    for name, flag in crit.items():
        mx = selftruth.matrix(ok, flag)
        result[name] = mx
        print(
            f"{name:28} {mx['flagged_bad']:5} {mx['missed_bad']:5} {mx['false_alarm']:5} "
            f"{mx['passed_good']:5} {_pct(mx['false_alarm_rate']):>12} {_pct(mx['miss_rate']):>8}"
        )
    om = selftruth.onset_matrix(ok)
    result["onsets (figure level)"] = om
    print(
        f"\nreply onsets, figure level: {om['flagged_off']} off and flagged, {om['missed_off']} "
        f"off and passed, {om['false_alarm']} within and flagged, {om['passed_good']} within "
        f"and passed (false alarm {_pct(om['false_alarm_rate'])}, miss {_pct(om['miss_rate'])}; "
        f"largest error above its bound {om['worst_error_above_bound_ms']} ms)"
    )
    print("\nby grid point (n:hogs:workers:rt hogs:rt priority): rollouts, off, flags")
    points: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for r in ok:
        key = (r["n"], r["hogs"], r["workers"], r.get("rt_hogs", 0), r.get("rt_priority", 3))
        points.setdefault(key, []).append(r)
    for key in sorted(points):
        rs = points[key]
        bad = sum(bool(selftruth.actually_bad(r)) for r in rs)
        old = sum(selftruth.old_flag(r) for r in rs)
        rec = sum(selftruth.recorded_flag(r) for r in rs)
        new = sum(selftruth.new_flag(r) for r in rs)
        name = ":".join(map(str, key))
        print(f"  {name}: {len(rs)}, off {bad}, old {old}, recorded {rec}, new {new}")
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
    r.add_argument(
        "--rig-arg",
        action="append",
        help="one more argument for `rig run` (repeatable; e.g. --rig-arg=--arrival-stamps "
        "--rig-arg=loop), recorded in each row's `rig_args`",
    )
    m = sub.add_parser("matrix", help="confusion matrices from rows")
    m.add_argument("rows", nargs="+", help="row files (JSON, or .json.gz)")
    m.add_argument("--sweep", action="store_true", help="the new rules at other thresholds")
    m.add_argument("--json", help="write the matrices here")
    args = ap.parse_args()
    {"run": cmd_run, "matrix": cmd_matrix}[args.cmd](args)


if __name__ == "__main__":
    main()
