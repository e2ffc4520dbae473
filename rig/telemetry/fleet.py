"""The fleet at a glance: counts, latency so far, stalls, invalid timing and an ETA.

How this works: `summarize(rollouts, runs, latencies_ms, now_ns)` reads frozen rollout
snapshots (anything with the attributes used below) and the runs' `run` events, and returns a
frozen `FleetSummary` for the band above the fleet table. Pure: no clock, no I/O.

ETA: rollouts of one run take about the same time, so the median duration D of the rollouts
done so far stands for every rollout. Each of C slots (the run's concurrency) frees up when
its running rollout has had D (never in the past), pending rollouts go to the earliest free
slot one after another (with equal durations that is round robin over the slots in order of
freeing), and the ETA is when the last slot is done. No estimate before the first rollout is
done, nor when only running rollouts are left and all of them have already run longer than D
(D is then known to be too short for them): a guess would be a number without a basis.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rig.core.units import NS_PER_S

ACTIVE = frozenset({"connecting", "running", "draining"})


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a `run` event said: rollouts to stream, already done, at once."""

    run_id: str
    t_ns: int
    total: int
    skipped: int = 0
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class FleetSummary:
    total: int = 0  # rollouts this view expects (the runs' totals, or the rows seen)
    done: int = 0  # finished, whatever the outcome
    failed: int = 0  # finished with an outcome other than ok
    running: int = 0  # connecting, running or draining
    pending: int = 0  # not started yet
    skipped: int = 0  # already done in the run directory (resume)
    stalls: int = 0  # uplink stalls over every rollout
    stalled_rollouts: int = 0
    timing_invalid: int = 0  # rollouts whose timing the rig judged not valid
    n_responses: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None  # since the first run started (or the first rollout)


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least a fraction q of the data at or below it."""
    idx = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


def eta_s(
    durations_s: Sequence[float],
    active_elapsed_s: Sequence[float],
    pending: int,
    concurrency: int | None,
) -> float | None:
    """Seconds until every rollout is done (see the module docstring); None before any is."""
    if not durations_s:
        return None
    d = sorted(durations_s)[len(durations_s) // 2]
    slots = max(concurrency or 0, len(active_elapsed_s), 1)
    busy = sorted(max(0.0, d - e) for e in active_elapsed_s)
    free = [0.0] * (slots - len(busy)) + busy
    end = max(busy, default=0.0)
    if pending <= 0 and busy and end == 0.0:
        return None
    for j, t in enumerate(free[: max(0, pending)]):
        jobs = -(-(pending - j) // slots)  # ceil: slot j takes jobs j, j+C, j+2C, ...
        end = max(end, t + jobs * d)
    return end


class LatencySample:
    """The fleet's response latencies, sorted, for p50/p95 so far: every one up to `max_n`,
    then a uniform sample of them (reservoir sampling, seeded: the same run draws the same
    band), so a flood of responses costs bounded memory and leaves the percentiles unbiased."""

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.n = 0  # responses seen
        self.sorted_ms: list[float] = []
        self._rng = random.Random(0)

    def add(self, latency_ms: float) -> None:
        # on a sorted list, dropping the element at a uniformly random index is dropping a
        # uniformly random element: reservoir sampling as usual
        self.n += 1
        kept = self.sorted_ms
        if len(kept) >= self.max_n:
            j = self._rng.randrange(self.n)
            if j >= len(kept):
                return
            del kept[j]
        bisect.insort(kept, latency_ms)


def summarize(
    rollouts: Iterable[Any],
    runs: Sequence[RunInfo],
    latencies_ms: Sequence[float],
    now_ns: int,
    n_responses: int | None = None,
) -> FleetSummary:
    """The band's numbers. `latencies_ms` is the response latencies so far, sorted (every
    one, or a uniform sample of the `n_responses` there were)."""
    done = failed = running = pending = stalls = stalled = invalid = 0
    durations: list[float] = []
    active_elapsed: list[float] = []
    n = 0
    for r in rollouts:
        n += 1
        stalls += r.stalls
        stalled += r.stalls > 0
        invalid += r.timing_valid is False
        if r.state == "done":
            done += 1
            failed += r.status not in (None, "ok")
            if r.elapsed_s is not None:
                durations.append(r.elapsed_s)
        elif r.state in ACTIVE:
            running += 1
            active_elapsed.append(r.elapsed_s or 0.0)
        else:
            pending += 1
    total = sum(run.total for run in runs) if runs else 0
    total = max(total, n)
    not_started = total - done - running  # pending rows plus rollouts not heard of yet
    concurrency = None
    if runs and all(run.concurrency for run in runs):
        concurrency = sum(run.concurrency or 0 for run in runs)
    starts = [run.t_ns for run in runs]
    return FleetSummary(
        total=total,
        done=done,
        failed=failed,
        running=running,
        pending=not_started,
        skipped=sum(run.skipped for run in runs),
        stalls=stalls,
        stalled_rollouts=stalled,
        timing_invalid=invalid,
        n_responses=len(latencies_ms) if n_responses is None else n_responses,
        latency_p50_ms=percentile(latencies_ms, 0.5) if latencies_ms else None,
        latency_p95_ms=percentile(latencies_ms, 0.95) if latencies_ms else None,
        eta_s=eta_s(durations, active_elapsed, not_started, concurrency),
        elapsed_s=(now_ns - min(starts)) / NS_PER_S if starts else None,
    )
