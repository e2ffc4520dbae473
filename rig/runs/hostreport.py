"""`host_pauses.json`: what the host watch saw (rig.hostwatch), matched to flagged rollouts.

After a run with `--host-watch`, every rollout (and earlier attempt, `<id>.failed-K`) whose
own timing failed is read back and its late uplink frames matched to the host pauses
(rig.analysis.hostpause). Off the event loop, after the last rollout: nothing here touches
a stream. The file holds one entry per watched invocation (a resume adds one), written
atomically; the rollouts' own files are never changed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from rig.analysis.hostpause import Interval, attribute, budget_stops, host_pauses
from rig.hostwatch import Observed
from rig.recordings.jsonwrite import write_json_atomic
from rig.recordings.rundir import read_json
from rig.rtbudget import rt_budget

FILE = "host_pauses.json"
#: pauses listed in the file (all of them are counted)
LISTED = 2_000


def uplink_frames(rollout_dir: str) -> list[tuple[int, int]]:
    """(deadline_ns, send_ns) of every uplink frame in a rollout's chunks.jsonl."""
    out: list[tuple[int, int]] = []
    try:
        with open(os.path.join(rollout_dir, "chunks.jsonl"), encoding="utf-8") as f:
            for line in f:
                if '"up"' not in line:  # a down chunk (quick test, then the record's own)
                    continue
                try:
                    rec = json.loads(line)
                    if rec.get("dir") == "up":
                        out.append((int(rec["t_sched_ns"]), int(rec["t_ns"])))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue  # a torn last line after a crash: the rest still counts
    except OSError:
        return []
    return out


def split_pauses(
    observed: Observed, budget: Mapping[str, Any] | None
) -> tuple[list[Interval], list[Interval]]:
    """(the host's pauses, the kernel's real-time budget's stops): while the budget
    (rig.rtbudget.rt_budget) throttles, the stops that end at one phase of its period are
    its own (rig.analysis.hostpause)."""
    pauses = host_pauses(observed.late)
    if not budget or not budget["throttles"]:
        return pauses, []
    flags = budget_stops(pauses, budget["period_us"] * 1000)
    host = [p for p, f in zip(pauses, flags, strict=True) if not f]
    return host, [p for p, f in zip(pauses, flags, strict=True) if f]


def _flagged(rollout_dir: str) -> bool:
    try:
        m = read_json(os.path.join(rollout_dir, "metrics.json"))
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("timing_valid") is False


def write_host_report(run_dir: str, observed: Observed) -> dict[str, dict[str, Any]]:
    """Write this watch into `<run_dir>/host_pauses.json`; returns rollout (or attempt) dir
    name -> its attribution, for the flagged ones streamed while the watch ran."""
    rt = rt_budget()
    pauses, budget = split_pauses(observed, rt)
    late_ns = round(observed.threshold_ms * 1e6)
    rollouts: dict[str, dict[str, Any]] = {}
    root = os.path.join(run_dir, "rollouts")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        d = os.path.join(root, name)
        if not _flagged(d):
            continue
        frames = uplink_frames(d)
        if not frames or frames[0][0] < observed.start_ns or frames[-1][1] > observed.end_ns:
            continue  # streamed before this watch (a resume) or after it: not seen
        rollouts[name] = attribute(frames, pauses, late_ns)
    path = os.path.join(run_dir, FILE)
    watches: list[Any] = []
    if os.path.exists(path):
        try:
            old = read_json(path)
            watches = list(old.get("watches") or []) if isinstance(old, dict) else []
        except (OSError, ValueError):
            observed.errors.append(f"an unreadable {FILE} was replaced")
    entry = {
        "watch": observed.describe(),
        "host_pauses": len(pauses),
        "host_pause_max_ms": round(max((b - a for a, b in pauses), default=0) / 1e6, 3),
        "host_pause_total_ms": round(sum(b - a for a, b in pauses) / 1e6, 3),
        "pauses": [[a, b] for a, b in pauses[:LISTED]],
        # stops ending at one phase of the kernel's real-time budget: not the host's
        "budget_stops": [[a, b] for a, b in budget[:LISTED]],
        "rt_budget": rt,
        "rollouts": rollouts,
    }
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomic(path, {"watches": [*watches, entry]})
    return rollouts


def host_summary(observed: Observed) -> dict[str, Any]:
    """The watch in a few numbers (for the run's closing lines)."""
    pauses, budget = split_pauses(observed, rt_budget())
    return {
        "cpus": len(observed.cpus),
        "rt": observed.rt,
        "seconds": round((observed.end_ns - observed.start_ns) / 1e9, 1),
        "host_pauses": len(pauses),
        "host_pause_max_ms": round(max((b - a for a, b in pauses), default=0) / 1e6, 3),
        "budget_stops": len(budget),
        "overdue_wakes": sum(len(v) for v in observed.late.values()),
        "threshold_ms": observed.threshold_ms,
        "errors": list(observed.errors),
    }


def host_watch_line(
    summary: Mapping[str, Any], rollouts: Mapping[str, Mapping[str, Any]] | None
) -> str:
    """The run's closing line about the machine: its pauses, and how many of the flagged
    rollouts' clusters of late frames they overlap."""
    line = (
        f"host watch ({summary['cpus']} CPUs, {summary['rt']}, {summary['seconds']:g} s): "
        f"{summary['host_pauses']} pauses of the whole machine over "
        f"{summary['threshold_ms']:g} ms (longest {summary['host_pause_max_ms']:g} ms)"
    )
    if summary.get("budget_stops"):
        line += (
            f", and {summary['budget_stops']} stops that ended at one instant of each second: "
            "the kernel's real-time budget, which stops the observers with the loops (not "
            "counted as the machine's)"
        )
    reports = list((rollouts or {}).values())
    clusters = sum(int(r.get("late_clusters") or 0) for r in reports)
    if clusters:
        inside = sum(int(r.get("in_host_pause") or 0) for r in reports)
        line += (
            f"; {inside} of {clusters} clusters of late frames in {len(reports)} flagged "
            "rollouts and attempts overlap one"
        )
    line += f"; {FILE}"
    if summary.get("errors"):
        line += f" (observer trouble: {'; '.join(summary['errors'][:3])})"
    return line
