"""`--concurrency auto`: how many rollouts may run at once, from the event loop's own lag.

Why: past what one loop can pace, more rollouts do not degrade, they collapse (seconds of
lateness), and every running rollout pays for the one too many. New rollouts should wait
instead. The controller is AIMD, as TCP's congestion window: every `interval_ms` it reads the
loop's lag p99 over that interval (rig.core.selfcheck via rig.loopwatch); over `budget_ms` it
multiplies the limit by `decrease` (never below `min_limit`), under it and with the limit in
use it adds `increase` (never above `max_limit`). A rollout may start only while fewer than
the limit run and the last interval was within budget: the runner never starts a rollout
while the loop is over budget, except that `min_limit` (1) always run, so a machine loaded
by others slows a run down to one at a time but never stops it. Sans-I/O: times and
measurements in, decisions out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rig.core.units import NS_PER_MS


@dataclass(frozen=True, slots=True)
class AimdConfig:
    budget_ms: float = 5.0  # loop lag p99 per interval
    start: int = 4
    min_limit: int = 1
    max_limit: int = 100_000
    increase: float = 2.0
    decrease: float = 0.5
    interval_ms: float = 500.0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Aimd:
    cfg: AimdConfig = field(default_factory=AimdConfig)
    limit: float = 0.0
    over_budget: bool = False
    last_ns: int | None = None
    #: (t_ns, limit, lag_p99_ms) at every decision, for the manifest
    history: list[tuple[int, int, float | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.limit = float(max(self.cfg.min_limit, min(self.cfg.start, self.cfg.max_limit)))

    @property
    def current(self) -> int:
        return int(self.limit)

    def due(self, t_ns: int) -> bool:
        """Is an interval over (time to `update`)?"""
        return self.last_ns is None or t_ns - self.last_ns >= self.cfg.interval_ms * NS_PER_MS

    def update(self, t_ns: int, lag_p99_ms: float | None, peak_running: int) -> int:
        """One interval's verdict: `lag_p99_ms` of the loop over it (None: no sample: keep
        the limit), `peak_running` the most rollouts that ran at once in it."""
        cfg = self.cfg
        self.last_ns = t_ns
        if lag_p99_ms is not None:
            self.over_budget = lag_p99_ms > cfg.budget_ms
            if self.over_budget:
                self.limit = max(float(cfg.min_limit), self.limit * cfg.decrease)
            elif peak_running >= self.current:  # only a limit in use has earned a raise
                self.limit = min(float(cfg.max_limit), self.limit + cfg.increase)
        self.history.append((t_ns, self.current, lag_p99_ms))
        return self.current

    def may_start(self, running: int) -> bool:
        """Below `min_limit` always (the run goes on however loaded the machine: that lag is
        not ours); above it only in budget and under the limit."""
        if running < self.cfg.min_limit:
            return True
        return not self.over_budget and running < self.current

    def summary(self) -> dict[str, Any]:
        limits = [h[1] for h in self.history]
        return {
            "config": self.cfg.as_dict(),
            "final_limit": self.current,
            "max_limit_reached": max(limits) if limits else self.current,
            "decisions": len(self.history),
            "over_budget_intervals": sum(
                1 for h in self.history if h[2] is not None and h[2] > self.cfg.budget_ms
            ),
        }
