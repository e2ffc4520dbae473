"""The loop's own record: lag histogram, late wake-ups with their times, run delay, steal,
writer backlog (sans-I/O; rig.loopwatch feeds it, rig.core.selfcheck judges from it).

`LoopMonitor` takes (due, woke) pairs of the monitor's ticks and of every stream's frame
timers, run-delay totals, steal and backlog samples with their times; a rollout takes a
`mark()` when it starts and `since(mark, t_ns)` when it ends. Lag goes into a fixed histogram
(0.25 ms bins), so a mark is a copy of ~400 ints and a summary needs no sort of the rollout's
samples; lags above 1 ms are kept with their times, and `view()` hands a stretch of them to the
figure bounds as sorted lists (`LagView`). The kept events are plain lists trimmed in bulk
(`_Events`), not deques: a rollout's end bisects them and slices out its stretch, which on a
deque walks from the oldest event (O(events kept) per rollout: 10 % of the loop's samples at
100 rollouts once an overload had filled them).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rig.core.units import NS_PER_MS

BIN_NS = 250_000  # 0.25 ms
N_BINS = 400  # 0..100 ms, the last bin holds everything above
#: lags, run delays and backlogs above these are kept one by one (for maxima in a window)
KEEP_LAG_NS = NS_PER_MS
KEEP_EVENTS = 200_000
#: late sends closer together than this are kept as one (the largest)
MERGE_NS = NS_PER_MS
#: how far after a stamp (and how many) wake-ups that were due before it are looked for
OVERDUE_NS = 1_000 * NS_PER_MS
OVERDUE_SCAN = 64


class _Events:
    """(time, value) events in time order, at least the last KEEP_EVENTS of them: two lists,
    the oldest dropped in one slice once twice that many are held (amortised O(1) appends;
    bisection and slices at list speed)."""

    __slots__ = ("t", "v")

    def __init__(self) -> None:
        self.t: list[int] = []
        self.v: list[int] = []

    def __len__(self) -> int:
        return len(self.t)

    def append(self, t_ns: int, value: int) -> None:
        self.t.append(t_ns)
        self.v.append(value)
        if len(self.t) > 2 * KEEP_EVENTS:
            del self.t[:-KEEP_EVENTS], self.v[:-KEEP_EVENTS]

    def between(self, lo_ns: int, hi_ns: int) -> tuple[list[int], list[int]]:
        i, j = bisect.bisect_left(self.t, lo_ns), bisect.bisect_right(self.t, hi_ns)
        return self.t[i:j], self.v[i:j]

    def max_after(self, t_ns: int) -> int | None:
        i = bisect.bisect_left(self.t, t_ns)
        return max(self.v[i:]) if i < len(self.v) else None


@dataclass(frozen=True, slots=True)
class Mark:
    """Where a rollout started in the monitor's streams."""

    t_ns: int
    bins: tuple[int, ...]
    ticks: int
    run_delay_ns: int | None
    steal_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LoopStats:
    """The loop as one rollout saw it (between its mark and its end)."""

    ticks: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    run_delay_ms: float | None  # None: the kernel's schedstat was not readable
    run_delay_share: float | None
    backlog_max: int
    span_ms: float
    #: CPU time the hypervisor took from this VM in the span (all CPUs, /proc/stat `steal`,
    #: 10 ms ticks): a stall with neither run delay nor steal is the loop's own
    steal_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class LoopMonitor:
    """Running record of the loop's lag, the loop thread's run delay and the writer backlog."""

    def __init__(self) -> None:
        self._bins = [0] * N_BINS
        self.ticks = 0
        self._big = _Events()  # tick lags above KEEP_LAG_NS
        self._backlog = _Events()  # backlog samples > 0
        self._run_delay_ns: int | None = None
        self._steal_ns: int | None = None
        self.max_lag_ns = 0
        #: late frame wake-ups of every stream on the loop (> KEEP_LAG_NS; one per
        #: MERGE_NS, its largest lag: 50 streams late together are one event)
        self._send = _Events()

    def tick(self, due_ns: int, woke_ns: int) -> int:
        """The periodic task was due at `due_ns` and ran at `woke_ns`; returns the lag."""
        lag = max(0, woke_ns - due_ns)
        self._bins[min(lag // BIN_NS, N_BINS - 1)] += 1
        self.ticks += 1
        if lag > KEEP_LAG_NS:
            self._big.append(woke_ns, lag)
        if lag > self.max_lag_ns:
            self.max_lag_ns = lag
        return lag

    def frame_woke(self, due_ns: int, woke_ns: int) -> None:
        """A stream on this loop slept until its frame's deadline `due_ns` and woke at
        `woke_ns`: a timer wake-up like a tick, and with many streams a far denser probe of
        the loop's lag than the ticks (a stream already behind its deadline is no probe:
        the session feeds only wake-ups from a real wait)."""
        lag = woke_ns - due_ns
        if lag <= KEEP_LAG_NS:
            return
        send = self._send
        if send.t and woke_ns - send.t[-1] < MERGE_NS:
            if lag > send.v[-1]:
                send.v[-1] = lag
            return
        send.append(woke_ns, lag)

    def view(self, lo_ns: int, hi_ns: int) -> LagView:
        """The kept late wake-ups (ticks and frame timers) that woke in [lo_ns, hi_ns], as
        plain sorted lists: a bisection and a slice of each kind, so a rollout's many stamps
        are bounded by bisection on short lists (10^5 events can be kept after an overload)."""
        big_t, big_v = self._big.between(lo_ns, hi_ns)
        send_t, send_v = self._send.between(lo_ns, hi_ns)
        if not big_t:
            return LagView(send_t, send_v)
        if not send_t:
            return LagView(big_t, big_v)
        pairs = sorted(zip(big_t + send_t, big_v + send_v, strict=True))
        return LagView([t for t, _ in pairs], [v for _, v in pairs])

    def lag_near(self, t_ns: int, before_ns: int, after_ns: int) -> int:
        """`LagView.lag_near` for one stamp."""
        return self.view(t_ns - before_ns, t_ns + OVERDUE_NS).lag_near(t_ns, before_ns, after_ns)

    def run_delay(self, total_wait_ns: int) -> None:
        """The loop thread's total run-queue wait so far (schedstat's second field)."""
        self._run_delay_ns = total_wait_ns

    def steal(self, total_steal_ns: int) -> None:
        """The machine's total steal time so far (/proc/stat, summed over CPUs)."""
        self._steal_ns = total_steal_ns

    def backlog(self, t_ns: int, items: int) -> None:
        """The writer's queue length at `t_ns` (only non-zero samples are kept)."""
        if items > 0:
            self._backlog.append(t_ns, items)

    def mark(self, t_ns: int) -> Mark:
        return Mark(t_ns, tuple(self._bins), self.ticks, self._run_delay_ns, self._steal_ns)

    def since(self, mark: Mark, t_ns: int) -> LoopStats:
        """The loop between `mark` and `t_ns`."""
        counts = [a - b for a, b in zip(self._bins, mark.bins, strict=True)]
        n = self.ticks - mark.ticks
        span_ns = max(0, t_ns - mark.t_ns)
        lag_max = self._big.max_after(mark.t_ns)
        if lag_max is None and n:
            top = max(i for i, c in enumerate(counts) if c)
            lag_max = min((top + 1) * BIN_NS, KEEP_LAG_NS)  # all below the kept threshold
        run_ms = share = None
        if mark.run_delay_ns is not None and self._run_delay_ns is not None:
            run_ns = max(0, self._run_delay_ns - mark.run_delay_ns)
            run_ms = round(run_ns / NS_PER_MS, 3)
            share = round(run_ns / span_ns, 4) if span_ns else 0.0
        max_ms = None if lag_max is None else round(lag_max / NS_PER_MS, 3)
        steal_ms = None
        if mark.steal_ns is not None and self._steal_ns is not None:
            steal_ms = round(max(0, self._steal_ns - mark.steal_ns) / NS_PER_MS, 3)
        return LoopStats(
            ticks=n,
            lag_p50_ms=_capped(_quantile_ms(counts, n, 0.50), max_ms),
            lag_p99_ms=_capped(_quantile_ms(counts, n, 0.99), max_ms),
            lag_max_ms=max_ms,
            run_delay_ms=run_ms,
            run_delay_share=share,
            backlog_max=self._backlog.max_after(mark.t_ns) or 0,
            span_ms=round(span_ns / NS_PER_MS, 3),
            steal_ms=steal_ms,
        )


class LagView:
    """Late wake-ups of a stretch of the loop's time: `woke_ns` sorted, `lag_ns` beside."""

    def __init__(self, woke_ns: list[int], lag_ns: list[int]) -> None:
        self.woke_ns = woke_ns
        self.lag_ns = lag_ns

    def lag_near(self, t_ns: int, before_ns: int, after_ns: int) -> int:
        """The largest lag of any wake-up in [t_ns - before_ns, t_ns + after_ns], or of one
        due before `t_ns` that ran after it however late (an overloaded loop wakes seldom):
        how late the loop got to things around a stamp taken at `t_ns`; lags up to
        KEEP_LAG_NS count as that bound."""
        ts, vs = self.woke_ns, self.lag_ns
        i, j = bisect.bisect_left(ts, t_ns - before_ns), bisect.bisect_right(ts, t_ns + after_ns)
        worst = max(vs[i:j], default=KEEP_LAG_NS)
        k = bisect.bisect_left(ts, t_ns)  # wake-ups after the stamp that were due before it
        for m in range(k, min(k + OVERDUE_SCAN, len(ts))):
            if ts[m] > t_ns + OVERDUE_NS:
                break
            if ts[m] - vs[m] <= t_ns:
                worst = max(worst, vs[m])
        return max(worst, KEEP_LAG_NS)

    def lag_over(self, stamps: Sequence[int], before_ns: int, after_ns: int) -> int:
        """`max(lag_near(t, ...) for t in stamps)`, exactly, in one pass over the wake-ups
        (each looked up among the sorted stamps) instead of one window per stamp: a rollout
        has hundreds of received chunks and, in a healthy run, few late wake-ups. A wake-up
        counts when some stamp is where `lag_near` would see it: within its window, or
        before it and after it was due (among the OVERDUE_SCAN wake-ups after the stamp)."""
        ts, vs = self.woke_ns, self.lag_ns
        cs = sorted(stamps)
        n = len(cs)
        worst = KEEP_LAG_NS
        for m, t in enumerate(ts):
            v = vs[m]
            if v <= worst:
                continue
            i = bisect.bisect_left(cs, t - after_ns)  # a stamp in [t - after, t + before]
            if i < n and cs[i] <= t + before_ns:
                worst = v
                continue
            lo = max(t - OVERDUE_NS, t - v)  # a stamp it was overdue at, at most OVERDUE_NS back
            if m >= OVERDUE_SCAN:  # ...and it within the scan from the stamp's first wake-up
                lo = max(lo, ts[m - OVERDUE_SCAN] + 1)
            i = bisect.bisect_left(cs, lo)
            if i < n and cs[i] <= t:
                worst = v
        return worst

    def late_near(self, t_ns: int, within_ns: int, most: int = 16) -> list[tuple[int, int]]:
        """The late wake-ups in [t_ns - within_ns, t_ns + within_ns] as (woke - t_ns, lag),
        at most `most` of them (the largest lags), in time order: what a flagged onset's
        bound was made of."""
        ts, vs = self.woke_ns, self.lag_ns
        i, j = bisect.bisect_left(ts, t_ns - within_ns), bisect.bisect_right(ts, t_ns + within_ns)
        found = [(ts[k] - t_ns, vs[k]) for k in range(i, j)]
        return sorted(sorted(found, key=lambda e: -e[1])[:most])


def _capped(q_ms: float | None, max_ms: float | None) -> float | None:
    return q_ms if q_ms is None or max_ms is None else min(q_ms, max_ms)


def _quantile_ms(counts: list[int], n: int, q: float) -> float | None:
    """Upper edge of the bin holding quantile `q` (a bound, never an underestimate)."""
    if n <= 0:
        return None
    need = q * n
    acc = 0
    for i, c in enumerate(counts):
        acc += c
        if acc >= need:
            return round((i + 1) * BIN_NS / NS_PER_MS, 3)
    return round(N_BINS * BIN_NS / NS_PER_MS, 3)
