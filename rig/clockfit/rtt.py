"""Round-trip time statistics for one session, from whatever probes the transport has.

How this works
--------------
Feed `RttStats.add(rtt_ns, t_ns)` with each measured round trip (WebSocket ping/pong,
application probes, RTCP receiver reports later) and the shared-clock time it completed.
`summary()` returns a frozen `RttSummary`: count, min, p50, p95, max, mean, and jitter as
the mean absolute difference of consecutive round trips (RFC 3550's D, unsmoothed), with
"consecutive" meaning in `t_ns` order so probes added out of order still count right.

The minimum is what clock fitting wants: any round trip on a path is at least the
one-way minimum delay in either direction (`rig.clockfit.fit.bound_with_rtt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.core.units import NS_PER_MS


@dataclass(frozen=True, slots=True)
class RttSummary:
    """Round-trip statistics; every ns field is None when there were no samples."""

    source: str
    count: int
    min_ns: int | None
    p50_ns: float | None
    p95_ns: float | None
    max_ns: int | None
    mean_ns: float | None
    jitter_ns: float | None
    first_t_ns: int | None
    last_t_ns: int | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, in ms (metrics.json)."""

        def ms(v: float | None) -> float | None:
            return None if v is None else v / NS_PER_MS

        return {
            "source": self.source,
            "count": self.count,
            "rtt_min_ms": ms(self.min_ns),
            "rtt_p50_ms": ms(self.p50_ns),
            "rtt_p95_ms": ms(self.p95_ns),
            "rtt_max_ms": ms(self.max_ns),
            "rtt_mean_ms": ms(self.mean_ns),
            "rtt_jitter_ms": ms(self.jitter_ns),
            "first_t_ns": self.first_t_ns,
            "last_t_ns": self.last_t_ns,
        }


class RttStats:
    """Accumulates round trips of one session; cheap `add`, all work in `summary`."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self._rtt_ns: list[int] = []
        self._t_ns: list[int] = []

    def __len__(self) -> int:
        return len(self._rtt_ns)

    def add(self, rtt_ns: int, t_ns: int) -> None:
        """One round trip of rtt_ns that completed at t_ns on the shared clock."""
        if isinstance(rtt_ns, bool) or not isinstance(rtt_ns, int | np.integer):
            raise ValueError(f"rtt_ns must be integer ns, got {rtt_ns!r}")
        if rtt_ns < 0:
            raise ValueError(f"a round trip cannot be negative: {rtt_ns} ns")
        self._rtt_ns.append(int(rtt_ns))
        self._t_ns.append(int(t_ns))

    @property
    def min_ns(self) -> int | None:
        return min(self._rtt_ns) if self._rtt_ns else None

    def summary(self) -> RttSummary:
        n = len(self._rtt_ns)
        if n == 0:
            return RttSummary(self.source, 0, None, None, None, None, None, None, None, None)
        order = np.argsort(np.asarray(self._t_ns, dtype=np.int64), kind="stable")
        rtt = np.asarray(self._rtt_ns, dtype=np.int64)[order]
        t = np.asarray(self._t_ns, dtype=np.int64)[order]
        p50, p95 = np.percentile(rtt, [50, 95])
        jitter = float(np.mean(np.abs(np.diff(rtt)))) if n >= 2 else None
        return RttSummary(
            source=self.source,
            count=n,
            min_ns=int(rtt.min()),
            p50_ns=float(p50),
            p95_ns=float(p95),
            max_ns=int(rtt.max()),
            mean_ns=float(rtt.mean()),
            jitter_ns=jitter,
            first_t_ns=int(t[0]),
            last_t_ns=int(t[-1]),
        )
