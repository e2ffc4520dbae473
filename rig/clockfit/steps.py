"""Clock steps: where a peer's clock jumped (an NTP step, a restart, a resync) mid-run.

How this works
--------------
One straight line cannot map a clock that jumped: fitted across the jump it is wrong on both
sides by up to half the jump. Four-timestamp probes (t0 sent, t1 peer receive, t2 peer send,
t3 received) give per probe the NTP offset theta = ((t1 - t0) + (t2 - t3)) / 2, which lies
within rtt / 2 of the true offset at that moment whatever the path asymmetry (a hard bound,
not a statistical one). Between consecutive probes the true offset moves by the drift times
the time between them; the drift is the median slope of theta over all probe pairs (robust to
the one pair a step corrupts). So a change of theta, minus drift, larger than the two probes'
half round trips together, plus what the drift estimate can be off by over that gap, plus
`margin_ns`, cannot be queueing or asymmetry: the clock stepped between those probes. Steps
are only claimed where that bound proves them; steps under about two round trips stay
invisible (and inside the fits' error bars).

Pure functions. `split_fit` is the one stepped fit: find the steps, fit each stretch between
them on its own (the latency split, rig/analysis/latency.py, and the MQTT device clock,
rig/telemetry/deviceclock.py, both use it); `segment_at` sends a stamped message near a
step to the side whose map gives it a plausible (smallest non-negative) delay.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from rig.clockfit.mapping import ClockMap, FitRefusal
from rig.core.units import NS_PER_MS, NS_PER_S

Timestamps = Sequence[int] | npt.NDArray[np.integer]
DEFAULT_MARGIN_NS = NS_PER_MS  # a step must beat the hard bound by this much as well
EARLIEST_NS, LATEST_NS = -(2**63), 2**63  # open ends of the first and last stretch


@dataclass(frozen=True, slots=True)
class ClockStep:
    """The peer clock jumped between probe `index - 1` and probe `index`."""

    index: int  # first probe after the step (in send order)
    peer_ns: int  # peer time halfway between the two probes (on the pre-step clock)
    local_ns: int  # local time halfway between them: where the stretches meet
    window_from_ns: int  # the jump happened after this local time (last probe before it
    window_to_ns: int  # came back) and before this one (first probe after it was sent)
    step_ns: int  # the jump: peer time read after minus what the old line predicts
    bound_ns: int  # the largest change queueing, asymmetry and drift could explain

    def as_dict(self) -> dict[str, Any]:
        return {
            "probe_index": self.index,
            "peer_ns": self.peer_ns,
            "local_ns": self.local_ns,
            "window_ms": round((self.window_to_ns - self.window_from_ns) / NS_PER_MS, 3),
            "step_ms": round(self.step_ns / NS_PER_MS, 3),
            "bound_ms": round(self.bound_ns / NS_PER_MS, 3),
        }


def find_probe_steps(
    t0_ns: Timestamps,
    t1_peer_ns: Timestamps,
    t2_peer_ns: Timestamps,
    t3_ns: Timestamps,
    *,
    margin_ns: int = DEFAULT_MARGIN_NS,
) -> list[ClockStep]:
    """Steps proven by the probes (in send order), earliest first; [] for fewer than 4.

    The drift is the median of the consecutive pairs' slopes. Each pair's slope is within
    e_j = (h_j + h_j+1) / dt_j of the true drift (h: half round trips), so with at most a
    minority of pairs across steps the median is within max(e_j): the bound for the change
    across gap i is h_i + h_i+1 + dt_i * max(e_j) + margin. Nothing here is statistical."""
    t0 = np.asarray(t0_ns, dtype=np.int64)
    t1 = np.asarray(t1_peer_ns, dtype=np.int64)
    t2 = np.asarray(t2_peer_ns, dtype=np.int64)
    t3 = np.asarray(t3_ns, dtype=np.int64)
    n = int(t0.size)
    if not (t1.size == t2.size == t3.size == n):
        raise ValueError("the four probe timestamp lists differ in length")
    if n < 4:
        return []  # three pairs at least, so that one step leaves a majority of good slopes
    order = np.argsort(t0, kind="stable")
    t0, t1, t2, t3 = t0[order], t1[order], t2[order], t3[order]
    # offsets and half round trips relative to the first probe (small numbers, exact ints)
    theta = ((t1 - t0) + (t2 - t3)) / 2.0
    theta -= theta[0]
    half_rtt = np.maximum(0, (t3 - t0) - (t2 - t1)) / 2.0
    mid = ((t0 + t3) // 2 - t0[0]).astype(np.float64)  # local time of each probe
    dt = np.diff(mid)
    if np.any(dt <= 0):
        return []  # two probes at once: no slope to speak of
    pair_h = half_rtt[:-1] + half_rtt[1:]
    slope = float(np.median(np.diff(theta) / dt))  # d(offset)/d(local): the drift
    slope_err = float(np.max(pair_h / dt))
    jump = np.diff(theta) - slope * dt
    bound = pair_h + dt * slope_err + margin_ns
    steps = []
    for i in np.flatnonzero(np.abs(jump) > bound):
        k = int(i) + 1
        local_mid = int(t0[0]) + round((mid[k - 1] + mid[k]) / 2)
        peer_mid = int(t2[k - 1]) + round((local_mid - int(t3[k - 1])) * (1.0 + slope))
        steps.append(
            ClockStep(
                index=k,
                peer_ns=peer_mid,
                local_ns=local_mid,
                window_from_ns=int(t3[k - 1]),
                window_to_ns=int(t0[k]),
                step_ns=round(float(jump[i])),
                bound_ns=round(float(bound[i])),
            )
        )
    if len(steps) * 2 >= n - 1:
        return []  # most gaps "jump": the drift estimate itself is not to be trusted
    return steps


def stretches(steps: Sequence[ClockStep], n_probes: int) -> list[tuple[int, int, slice]]:
    """Per stretch between the steps: its local-time range [from, to) (for events and
    responses) and its probes as a slice of the probes in send order (the step's index
    decides, not the range: two probes can sit closer together than a round trip)."""
    edges = [EARLIEST_NS, *(st.local_ns for st in steps), LATEST_NS]
    cuts = [0, *(st.index for st in steps), n_probes]
    return [(edges[i], edges[i + 1], slice(cuts[i], cuts[i + 1])) for i in range(len(edges) - 1)]


def stretch_of(
    steps: Sequence[ClockStep],
    arrival_ns: int,
    delay_in: Callable[[int], float | None],
    settle_ns: int = NS_PER_S,
) -> int:
    """Which stretch (index into `stretches`) a stamped message belongs to, from its local
    arrival. Near a step (arrival between the last probe before it and `settle_ns` after the
    first probe after it) the stamp decides: the stretch whose map gives the smallest
    delay that is not negative (`delay_in(i)`: arrival minus the stamp mapped by stretch
    i, None if that stretch has no map); a wrong side is off by the whole step."""
    i = bisect.bisect_right([st.local_ns for st in steps], arrival_ns)
    for j, st in enumerate(steps):
        if st.window_from_ns <= arrival_ns <= st.window_to_ns + settle_ns:
            options = [(d, k) for k in (j, j + 1) if (d := delay_in(k)) is not None and d >= 0]
            if options:
                return min(options)[1]
    return i


def stretch_bounds_dict(lo: int, hi: int) -> dict[str, int | None]:
    """A stretch's range for JSON (open ends as null)."""
    return {
        "local_from_ns": None if lo == EARLIEST_NS else lo,
        "local_to_ns": None if hi == LATEST_NS else hi,
    }


Fit = TypeVar("Fit")


def split_fit(
    t0_ns: Timestamps,
    t1_peer_ns: Timestamps,
    t2_peer_ns: Timestamps,
    t3_ns: Timestamps,
    fit_stretch: Callable[[slice, int, int], Fit],
) -> tuple[list[ClockStep], list[tuple[int, int, Fit]]]:
    """The steps the probes (in send order) prove, and one fit per stretch between them:
    `fit_stretch(probes, local_from_ns, local_to_ns)` with the stretch's probes as a slice.
    Without a step (or with fewer than 4 probes) there is one stretch, open at both ends."""
    n = len(t0_ns)
    steps = find_probe_steps(t0_ns, t1_peer_ns, t2_peer_ns, t3_ns) if n else []
    return steps, [(lo, hi, fit_stretch(k, lo, hi)) for lo, hi, k in stretches(steps, n)]


def segment_at(
    steps: Sequence[ClockStep],
    segments: Sequence[tuple[int, int, Fit]],
    arrival_ns: int,
    peer_ns: int | None,
    map_of: Callable[[Fit], ClockMap | FitRefusal],
) -> Fit:
    """The segment of `split_fit` that a message stamped `peer_ns` (its peer clock; None:
    unstamped) which arrived at `arrival_ns` belongs to (see `stretch_of`)."""

    def delay(k: int) -> float | None:
        fit = map_of(segments[k][2])
        if peer_ns is None or not isinstance(fit, ClockMap):
            return None
        return float(arrival_ns - fit.to_local(peer_ns))

    return segments[stretch_of(steps, arrival_ns, delay)][2]
