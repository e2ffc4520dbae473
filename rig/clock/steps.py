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
half round trips together plus `margin_ns` cannot be queueing or asymmetry: the clock stepped
between those probes. Steps are only claimed where that bound proves them; small steps under
the probes' round trip stay invisible (and inside the fits' error bars).

Pure functions; the session's decomposition splits the probes at the steps and fits each
segment on its own (rig/decompose.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NS_PER_MS = 1_000_000
DEFAULT_MARGIN_NS = NS_PER_MS  # a step must beat the hard bound by this much as well


@dataclass(frozen=True, slots=True)
class ClockStep:
    """The peer clock jumped between probe `index - 1` and probe `index`."""

    index: int  # first probe after the step (in send order)
    peer_ns: int  # peer time halfway between the two probes (on the pre-step clock)
    local_ns: int  # local time halfway between them: where the segments meet
    step_ns: int  # the jump: peer time read after minus what the old line predicts
    bound_ns: int  # the largest change queueing and asymmetry could explain

    def as_dict(self) -> dict[str, Any]:
        return {
            "probe_index": self.index,
            "peer_ns": self.peer_ns,
            "local_ns": self.local_ns,
            "step_ms": round(self.step_ns / NS_PER_MS, 3),
            "bound_ms": round(self.bound_ns / NS_PER_MS, 3),
        }


def find_probe_steps(
    t0_ns: Sequence[int],
    t1_peer_ns: Sequence[int],
    t2_peer_ns: Sequence[int],
    t3_ns: Sequence[int],
    *,
    margin_ns: int = DEFAULT_MARGIN_NS,
) -> list[ClockStep]:
    """Steps proven by the probes (in send order), earliest first; [] for fewer than 3."""
    t0 = np.asarray(t0_ns, dtype=np.int64)
    t1 = np.asarray(t1_peer_ns, dtype=np.int64)
    t2 = np.asarray(t2_peer_ns, dtype=np.int64)
    t3 = np.asarray(t3_ns, dtype=np.int64)
    n = int(t0.size)
    if not (t1.size == t2.size == t3.size == n):
        raise ValueError("the four probe timestamp lists differ in length")
    if n < 3:
        return []
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
    slope = float(np.median(np.diff(theta) / dt))  # d(offset)/d(local): the drift
    jump = np.diff(theta) - slope * dt
    bound = half_rtt[:-1] + half_rtt[1:] + margin_ns
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
                step_ns=round(float(jump[i])),
                bound_ns=round(float(bound[i])),
            )
        )
    return steps
