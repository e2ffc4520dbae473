"""Did the rig's own timing hold? The loop-lag monitor and the `timing_valid` verdict.

Every stamp the rig takes (a send, an arrival) is taken on the event loop; when the loop is
late, so is every stamp, whatever the transport. A rollout's numbers are only as good as
the loop that took them, so each rollout gets a verdict on the rig itself, distinct from the
turn-taking `timing` block:

  uplink lateness   p99 of the rollout's own frames beyond `lateness_p99_ms` (default 5)
  stalls            any frame more than one frame late
  loop lag          how late a cheap periodic task on the loop woke, measured all the time
                    (also while the rollout only receives): p99 beyond `loop_lag_p99_ms`
                    or any single lag beyond `loop_lag_max_ms` (default: one frame)
  run delay         time the loop thread was runnable but waited for a CPU (the kernel's
                    schedstat), as a share of the rollout's time beyond `run_delay_share`
  writer backlog    records queued for the writer thread beyond `writer_backlog_max`

`LoopMonitor` is sans-I/O: the shell (rig.loopwatch) feeds it (due, woke) pairs, run-delay
totals and backlog samples with their times; a rollout takes a `mark()` when it starts and
`since(mark, t_ns)` when it ends. Lag goes into a fixed histogram (0.25 ms bins), so a mark
is a copy of ~400 ints and a summary needs no sort of the rollout's samples.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any

from rig.core.units import NS_PER_MS

BIN_NS = 250_000  # 0.25 ms
N_BINS = 400  # 0..100 ms, the last bin holds everything above
#: lags, run delays and backlogs above these are kept one by one (for maxima in a window)
KEEP_LAG_NS = NS_PER_MS
KEEP_EVENTS = 200_000


@dataclass(frozen=True, slots=True)
class TimingTolerance:
    """What the rig tolerates of itself before a rollout's timing is not valid."""

    lateness_p99_ms: float = 5.0
    loop_lag_p99_ms: float = 5.0
    loop_lag_max_ms: float = 20.0
    run_delay_share: float = 0.05
    writer_backlog_max: int = 5_000

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


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
        self._big_t: deque[int] = deque(maxlen=KEEP_EVENTS)  # lags above KEEP_LAG_NS
        self._big_lag: deque[int] = deque(maxlen=KEEP_EVENTS)
        self._backlog_t: deque[int] = deque(maxlen=KEEP_EVENTS)  # backlog samples > 0
        self._backlog_n: deque[int] = deque(maxlen=KEEP_EVENTS)
        self._run_delay_ns: int | None = None
        self._steal_ns: int | None = None
        self.max_lag_ns = 0

    def tick(self, due_ns: int, woke_ns: int) -> int:
        """The periodic task was due at `due_ns` and ran at `woke_ns`; returns the lag."""
        lag = max(0, woke_ns - due_ns)
        self._bins[min(lag // BIN_NS, N_BINS - 1)] += 1
        self.ticks += 1
        if lag > KEEP_LAG_NS:
            self._big_t.append(woke_ns)
            self._big_lag.append(lag)
        if lag > self.max_lag_ns:
            self.max_lag_ns = lag
        return lag

    def run_delay(self, total_wait_ns: int) -> None:
        """The loop thread's total run-queue wait so far (schedstat's second field)."""
        self._run_delay_ns = total_wait_ns

    def steal(self, total_steal_ns: int) -> None:
        """The machine's total steal time so far (/proc/stat, summed over CPUs)."""
        self._steal_ns = total_steal_ns

    def backlog(self, t_ns: int, items: int) -> None:
        """The writer's queue length at `t_ns` (only non-zero samples are kept)."""
        if items > 0:
            self._backlog_t.append(t_ns)
            self._backlog_n.append(items)

    def mark(self, t_ns: int) -> Mark:
        return Mark(t_ns, tuple(self._bins), self.ticks, self._run_delay_ns, self._steal_ns)

    def since(self, mark: Mark, t_ns: int) -> LoopStats:
        """The loop between `mark` and `t_ns`."""
        counts = [a - b for a, b in zip(self._bins, mark.bins, strict=True)]
        n = self.ticks - mark.ticks
        span_ns = max(0, t_ns - mark.t_ns)
        lag_max = _max_after(self._big_t, self._big_lag, mark.t_ns)
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
            backlog_max=_max_after(self._backlog_t, self._backlog_n, mark.t_ns) or 0,
            span_ms=round(span_ns / NS_PER_MS, 3),
            steal_ms=steal_ms,
        )


def _max_after(ts: deque[int], vs: deque[int], t_ns: int) -> int | None:
    i = bisect.bisect_left(ts, t_ns)
    if i >= len(ts):
        return None
    return max(vs[k] for k in range(i, len(ts)))


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


@dataclass(frozen=True, slots=True)
class Verdict:
    valid: bool
    reasons: tuple[str, ...]
    measured: dict[str, Any]

    @property
    def reason(self) -> str | None:
        return "; ".join(self.reasons) or None

    def as_dict(self, tolerance: TimingTolerance) -> dict[str, Any]:
        return {
            "reasons": list(self.reasons),
            **self.measured,
            "tolerance": tolerance.as_dict(),
        }


def judge(
    lateness_p99_ms: float | None,
    stalls: int,
    loop: LoopStats | None,
    tolerance: TimingTolerance,
    device_xruns: int = 0,
) -> Verdict:
    """The verdict on the rig's own timing for one rollout, with every reason it failed.
    A sound-card xrun is the rig's own audio path missing its deadline, like a stall."""
    tol = tolerance
    reasons: list[str] = []
    if device_xruns:
        reasons.append(f"{device_xruns} sound-card xrun{'s' if device_xruns != 1 else ''}")
    if lateness_p99_ms is not None and lateness_p99_ms > tol.lateness_p99_ms:
        reasons.append(f"uplink lateness p99 {lateness_p99_ms:.2f} ms > {tol.lateness_p99_ms} ms")
    if stalls:
        reasons.append(f"{stalls} stalled frame{'s' if stalls != 1 else ''}")
    if loop is None:
        reasons.append("event loop lag not measured")
    else:
        if loop.lag_p99_ms is not None and loop.lag_p99_ms > tol.loop_lag_p99_ms:
            lag = loop.lag_p99_ms
            reasons.append(f"event loop lag p99 {lag:.2f} ms > {tol.loop_lag_p99_ms} ms")
        if loop.lag_max_ms is not None and loop.lag_max_ms > tol.loop_lag_max_ms:
            lag = loop.lag_max_ms
            reasons.append(f"event loop lag max {lag:.1f} ms > {tol.loop_lag_max_ms} ms")
        if loop.run_delay_share is not None and loop.run_delay_share > tol.run_delay_share:
            reasons.append(
                f"loop thread waited for a CPU {loop.run_delay_share:.1%} of the time "
                f"(> {tol.run_delay_share:.0%})"
            )
        if loop.backlog_max > tol.writer_backlog_max:
            reasons.append(f"writer backlog {loop.backlog_max} records > {tol.writer_backlog_max}")
    measured: dict[str, Any] = {
        "uplink_lateness_p99_ms": lateness_p99_ms,
        "stalls": stalls,
        "loop": None if loop is None else loop.as_dict(),
    }
    return Verdict(not reasons, tuple(reasons), measured)
