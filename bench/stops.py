"""Stops of the whole loop in a run: its late uplink frames, pooled over every rollout and
grouped in time, with how many streams each group hit and how far apart the groups came.

Why: a stream that is late on its own is that stream's trouble (a slow callback of its
own, a blocked send); every stream late at the same instant is the loop (or the machine)
stopping. Groups that come one period apart point at the kernel's real-time budget
(rig.rtbudget: with the default 950 000 of 1 000 000 µs, real-time threads that fill every
CPU are all stopped for the rest of the second); docs/pacing.md, "Twentieth pass".

    python bench/stops.py RUN_DIR [--late-ms 8] [--gap-ms 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: late frames closer than this (deadline to deadline) belong to one stop
GAP_MS = 30.0
#: a stop that hits at least this share of the run's streams is the whole loop's
WIDE = 0.5


Late = list[tuple[int, float, str]]
Spans = dict[str, tuple[int, int]]


def late_frames(run_dir: Path, late_ms: float) -> tuple[Late, Spans]:
    """(deadline_ns, lateness_ms, rollout) of every uplink frame later than `late_ms`, and
    each rollout's first and last uplink deadline (when it streamed). A torn last line (a
    crash) is skipped; the rest still counts."""
    out: Late = []
    spans: Spans = {}
    for path in sorted(run_dir.glob("rollouts/*/chunks.jsonl")):
        name = path.parent.name
        first = last = None
        with path.open(encoding="utf-8") as f:
            for line in f:
                if '"up"' not in line:
                    continue
                try:
                    row = json.loads(line)
                    if row.get("dir") != "up":
                        continue
                    t, ns = int(row["t_sched_ns"]), row.get("lateness_ns")
                except (ValueError, KeyError, TypeError):
                    continue
                first = t if first is None else min(first, t)
                last = t if last is None else max(last, t)
                if ns is not None and ns > late_ms * 1e6:
                    out.append((t, ns / 1e6, name))
        if first is not None and last is not None:
            spans[name] = (first, last)
    return out, spans


def stops(late: Late, spans: Spans, gap_ms: float = GAP_MS) -> list[dict[str, Any]]:
    """Late frames grouped in time: first/last deadline, worst lateness, frames, the streams
    hit and the streams streaming during it."""
    out: list[dict[str, Any]] = []
    streams: list[set[str]] = []
    for t, ms, name in sorted(late):
        if out and t - out[-1]["last_ns"] < gap_ms * 1e6:
            s = out[-1]
            s["last_ns"] = t
            s["max_ms"] = max(s["max_ms"], ms)
            s["frames"] += 1
            streams[-1].add(name)
        else:
            out.append({"first_ns": t, "last_ns": t, "max_ms": ms, "frames": 1})
            streams.append({name})
    for s, names in zip(out, streams, strict=True):
        s["streams"] = len(names)
        s["active"] = sum(a <= s["last_ns"] and s["first_ns"] <= b for a, b in spans.values())
    return out


def summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    """The wide stops (hitting at least `WIDE` of the streams streaming during them) and the
    spacing of their starts."""
    wide = [s for s in found if s["streams"] >= WIDE * max(1, s["active"])]
    starts = [s["first_ns"] for s in wide]
    gaps_s = [(b - a) / 1e9 for a, b in zip(starts, starts[1:], strict=False)]
    return {
        "stops": len(found),
        "wide_stops": len(wide),
        "wide_worst_ms": round(max((s["max_ms"] for s in wide), default=0.0), 3),
        "wide_spacing_s": [round(g, 3) for g in gaps_s],
        "wide_spacing_median_s": round(statistics.median(gaps_s), 3) if gaps_s else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--late-ms", type=float, default=8.0, help="a frame this late counts")
    ap.add_argument("--gap-ms", type=float, default=GAP_MS, help="frames closer are one stop")
    ap.add_argument("--json", type=Path, help="write the stops and the summary here")
    args = ap.parse_args()
    late, spans = late_frames(args.run_dir, args.late_ms)
    if not spans:
        sys.exit(f"stops: no uplink frames in rollouts/*/chunks.jsonl under {args.run_dir}")
    found = stops(late, spans, args.gap_ms)
    t0 = min(a for a, _ in spans.values())
    for s in found:
        at_s, span_ms = (s["first_ns"] - t0) / 1e9, (s["last_ns"] - s["first_ns"]) / 1e6
        print(
            f"at {at_s:8.3f} s  span {span_ms:6.1f} ms  worst {s['max_ms']:6.1f} ms  "
            f"frames {s['frames']:5d}  streams {s['streams']}/{s['active']}"
        )
    out = summary(found)
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps({"stops": found, "summary": out}, indent=2) + "\n")


if __name__ == "__main__":
    main()
