"""Was it the machine? Host pauses (every CPU stopped at once) against a rollout's late frames.

Sans-I/O: the observers' overdue wakes per CPU (rig.hostwatch) and a rollout's uplink frames
(deadline, send stamp) in, plain numbers out. A *host pause* is a span in which every CPU's
observer was overdue at once: nothing on the machine ran, the rig included. Late frames that
come together (one stop hits every stream) are one *cluster*; a cluster whose frames' delays
[deadline, send] overlap a host pause was delayed by the machine, at least in part. One
outside every pause is the rig's own (or a pause shorter than the observers' threshold).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Interval = tuple[int, int]  # (start_ns, end_ns) on the shared monotonic clock

#: late frames closer than this to each other are one cluster (one event hit many streams)
CLUSTER_GAP_NS = 50_000_000
#: pauses ending this close to one phase of the real-time budget's period are the budget's
BUDGET_PHASE_NS = 500_000


def host_pauses(per_cpu: Mapping[int, Sequence[Interval]], min_ns: int = 0) -> list[Interval]:
    """Spans in which every CPU's observer was overdue at once, at least `min_ns` long."""
    if not per_cpu:
        return []
    lists = [sorted(v) for v in per_cpu.values()]
    common = _merge(lists[0])
    for other in lists[1:]:
        common = _intersect(common, _merge(other))
    return [(a, b) for a, b in common if b - a >= min_ns]


def _merge(xs: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in xs:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(xs: Sequence[Interval], ys: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def budget_stops(
    pauses: Sequence[Interval], period_ns: int, tol_ns: int = BUDGET_PHASE_NS
) -> list[bool]:
    """For each pause: does its end fall within `tol_ns` of another pause's end, on the
    circle of the budget's period? Those are the kernel's real-time budget ending its stop,
    not the host resuming (a host resumes whenever it does: two of its pauses end within
    ±0.5 ms of one phase of the second by chance once in 1 000 pairs)."""
    if period_ns <= 0 or len(pauses) < 2:
        return [False] * len(pauses)
    order = sorted(range(len(pauses)), key=lambda i: pauses[i][1] % period_ns)
    phases = [pauses[i][1] % period_ns for i in order]
    out = [False] * len(pauses)
    n = len(order)
    for k in range(n):
        for step in (-1, 1):  # the neighbours on the circle (wrapping past the period's end)
            d = abs(phases[k] - phases[(k + step) % n])
            if min(d, period_ns - d) <= tol_ns:
                out[order[k]] = True
    return out


@dataclass(frozen=True)
class Cluster:
    """Late frames that came together: from the first one's deadline to the last one's send."""

    start_ns: int
    end_ns: int
    frames: int
    worst_ns: int  # the latest frame's lateness

    def overlaps(self, pauses: Sequence[Interval]) -> bool:
        """Does any pause (disjoint, sorted: `host_pauses`) meet this cluster's span?"""
        k = bisect.bisect_left(pauses, (self.end_ns,))  # the pauses that began before its end
        return k > 0 and pauses[k - 1][1] > self.start_ns


def late_clusters(
    frames: Iterable[tuple[int, int]], late_ns: int, gap_ns: int = CLUSTER_GAP_NS
) -> list[Cluster]:
    """Clusters of frames (deadline_ns, send_ns) sent more than `late_ns` after their deadline."""
    late = sorted((d, s) for d, s in frames if s - d > late_ns)
    out: list[Cluster] = []
    for d, s in late:
        if out and d - out[-1].end_ns <= gap_ns:
            c = out[-1]
            out[-1] = Cluster(c.start_ns, max(c.end_ns, s), c.frames + 1, max(c.worst_ns, s - d))
        else:
            out.append(Cluster(d, s, 1, s - d))
    return out


def attribute(
    frames: Sequence[tuple[int, int]], pauses: Sequence[Interval], late_ns: int
) -> dict[str, Any]:
    """One rollout's late frames against the host pauses: how many clusters the machine's
    stops overlap, and the worst lateness outside them (the rig's own, as far as this says)."""
    if not frames:
        return {"late_clusters": 0, "in_host_pause": 0, "frames": 0}
    lo = min(d for d, _ in frames)
    hi = max(s for _, s in frames)
    during = [(a, b) for a, b in pauses if b > lo and a < hi]
    clusters = late_clusters(frames, late_ns)
    inside = [c for c in clusters if c.overlaps(during)]
    outside = [c for c in clusters if not c.overlaps(during)]
    return {
        "frames": len(frames),
        "late_ms": late_ns / 1e6,
        "late_frames": sum(c.frames for c in clusters),
        "late_clusters": len(clusters),
        "in_host_pause": len(inside),
        "worst_late_ms_in_pause": _ms(max((c.worst_ns for c in inside), default=None)),
        "worst_late_ms_outside": _ms(max((c.worst_ns for c in outside), default=None)),
        "host_pauses": len(during),
        "host_pause_max_ms": _ms(max((b - a for a, b in during), default=None)),
    }


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def verdict_line(rollout_id: str, report: Mapping[str, Any]) -> str | None:
    """One line for a flagged rollout: how much of its lateness was the machine's."""
    n = int(report.get("late_clusters") or 0)
    if not n:
        return None
    k = int(report.get("in_host_pause") or 0)
    line = (
        f"{rollout_id}: {k} of {n} clusters of frames later than {report.get('late_ms'):g} ms "
        "overlap a host pause (every CPU stopped)"
    )
    outside = report.get("worst_late_ms_outside")
    if outside is not None:
        line += f"; the worst outside one {outside:g} ms late"
    else:
        line += ": the machine, not the rig"
    return line
