"""Was it the machine? Pauses of the whole (virtual) machine, seen by an observer on every CPU
that does nothing but wake every millisecond, so a late frame of a run can be told apart
from the rig's own lateness.

Why: on the 2-core VM of issue #32 the 200-at-once run is bistable. A trivial sleeper at a
real-time priority above the rig's, one process pinned to each CPU, sees both CPUs stop for
8-50 ms at the same instant, about once a minute with nothing else running. No client can
send a frame on time through that; the self-check rightly flags the rollouts it hits.

    python bench/hostpause.py --seconds 60 --json pauses.json &   # beside a run
    python bench/hostpause.py --match RUN_DIR --pauses pauses.json

One child process per CPU (separate processes: threads would wait on each other's GIL and
make a pause of one look like a pause of all), each at SCHED_FIFO `--priority` (above the
rig's loop threads at 3, so the rig's own load cannot delay it), sleeping 1 ms at a time and
recording every wake that came more than `--threshold-ms` late, as an interval on the
shared monotonic clock. A *host pause* is a span in which every CPU's observer was overdue.
`--match` groups a run's late uplink frames (chunks.jsonl, lateness over `--late-ms`) into
clusters and says which ones began inside a host pause.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rig.analysis.hostpause import host_pauses as analysis_host_pauses

SLEEP_NS = 1_000_000
#: late frames closer than this to each other are one cluster (one event hit many streams)
CLUSTER_GAP_NS = 50_000_000

Interval = tuple[int, int]  # (start_ns, end_ns) on CLOCK_MONOTONIC


def observe(cpu: int, seconds: float, threshold_ms: float, priority: int) -> dict[str, Any]:
    """Sleep 1 ms at a time on `cpu`; every overdue wake as (start_ns, end_ns)."""
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        rt = f"SCHED_FIFO {priority}"
    except (OSError, AttributeError):
        rt = "default (SCHED_FIFO not permitted)"
    threshold_ns = int(threshold_ms * 1e6)
    late: list[Interval] = []
    wakes = 0
    end = time.monotonic_ns() + int(seconds * 1e9)
    prev = time.monotonic_ns()
    while prev < end:
        time.sleep(SLEEP_NS / 1e9)
        now = time.monotonic_ns()
        wakes += 1
        if now - prev - SLEEP_NS > threshold_ns:
            late.append((prev + SLEEP_NS, now))
        prev = now
    return {"cpu": cpu, "wakes": wakes, "rt": rt, "late": late}


def host_pauses(per_cpu: list[list[Interval]], min_ns: int) -> list[Interval]:
    """Spans in which every CPU was overdue at once, at least `min_ns` long (rig's own
    analysis, rig.analysis.hostpause, which `rig run --host-watch` uses)."""
    return analysis_host_pauses(dict(enumerate(per_cpu)), min_ns)


def clusters(late: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """(deadline_ns, lateness_ms) of late frames -> clusters: first/last deadline, worst, count."""
    out: list[dict[str, Any]] = []
    for t, ms in sorted(late):
        if out and t - out[-1]["last_ns"] < CLUSTER_GAP_NS:
            c = out[-1]
            c["last_ns"] = t
            c["max_ms"] = max(c["max_ms"], ms)
            c["frames"] += 1
        else:
            out.append({"first_ns": t, "last_ns": t, "max_ms": ms, "frames": 1})
    return out


def attribute(cls: list[dict[str, Any]], pauses: list[Interval]) -> list[dict[str, Any]]:
    """Mark each cluster with the host pause it overlaps (or None): from its first late
    frame's deadline to its last one's send (a loop already behind when the machine stopped
    has its first late deadline before the pause)."""
    for c in cls:
        end_ns = c["last_ns"] + int(c["max_ms"] * 1e6)
        c["host_pause"] = next(
            ([a, b] for a, b in pauses if c["first_ns"] <= b and end_ns >= a), None
        )
    return cls


def late_frames(run_dir: Path, late_ms: float) -> list[tuple[int, float]]:
    out = []
    for path in run_dir.glob("rollouts/*/chunks.jsonl"):
        with path.open() as f:
            for line in f:
                if '"up"' not in line:
                    continue
                row = json.loads(line)
                ns = row.get("lateness_ns")
                if row.get("dir") == "up" and ns is not None and ns > late_ms * 1e6:
                    out.append((int(row["t_sched_ns"]), ns / 1e6))
    return out


def run_observers(
    seconds: float, threshold_ms: float, priority: int, cpus: list[int]
) -> dict[str, Any]:
    load_before = os.getloadavg()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                str(cpu),
                "--seconds",
                str(seconds),
                "--threshold-ms",
                str(threshold_ms),
                "--priority",
                str(priority),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for cpu in cpus
    ]
    rows = []
    for cpu, p in zip(cpus, procs, strict=True):
        out = p.communicate()[0]
        if p.returncode != 0:
            raise SystemExit(f"hostpause: the observer on CPU {cpu} failed (exit {p.returncode})")
        rows.append(json.loads(out))
    min_ns = int(threshold_ms * 1e6)
    pauses = host_pauses([[(int(a), int(b)) for a, b in r["late"]] for r in rows], min_ns)
    return {
        "seconds": seconds,
        "threshold_ms": threshold_ms,
        "load_before": load_before,
        "cpus": rows,
        "host_pauses": [list(p) for p in pauses],
        "host_pause_ms": [round((b - a) / 1e6, 1) for a, b in pauses],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threshold-ms", type=float, default=5.0, help="overdue by more than this")
    ap.add_argument("--priority", type=int, default=5, help="SCHED_FIFO of the observers")
    ap.add_argument("--json", help="write the observation here")
    ap.add_argument("--match", type=Path, help="a run directory whose late frames to attribute")
    ap.add_argument("--pauses", type=Path, help="with --match: an earlier --json observation")
    ap.add_argument("--late-ms", type=float, default=8.0, help="with --match: a late frame")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(observe(args.child, args.seconds, args.threshold_ms, args.priority)))
        return
    if args.match is not None:
        if args.pauses is None:
            ap.error("--match needs --pauses FILE (an observation taken during the run)")
        obs = json.loads(args.pauses.read_text())
        pauses = [(int(a), int(b)) for a, b in obs["host_pauses"]]
        cls = attribute(clusters(late_frames(args.match, args.late_ms)), pauses)
        hit = [c for c in cls if c["host_pause"] is not None]
        for c in cls:
            where = "host pause" if c["host_pause"] else "-"
            print(
                f"{c['first_ns'] / 1e9:.3f} s  {c['frames']:5d} frames  "
                f"worst {c['max_ms']:6.1f} ms  {where}"
            )
        print(
            f"{len(cls)} clusters of frames late > {args.late_ms} ms; {len(hit)} overlap a "
            f"host pause ({len(pauses)} pauses observed); worst late frame outside one: "
            f"{max((c['max_ms'] for c in cls if c['host_pause'] is None), default=0.0):.1f} ms"
        )
        return
    cpus = sorted(os.sched_getaffinity(0))
    obs = run_observers(args.seconds, args.threshold_ms, args.priority, cpus)
    obs["load_after"] = os.getloadavg()
    for r in obs["cpus"]:
        print(
            f"cpu {r['cpu']}: {r['wakes']} wakes at {r['rt']}, {len(r['late'])} overdue "
            f"> {args.threshold_ms} ms"
        )
    print(
        f"host pauses (every CPU overdue at once): {obs['host_pause_ms']} ms; load "
        f"{obs['load_before'][0]:.2f} -> {obs['load_after'][0]:.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(obs))


if __name__ == "__main__":
    main()
