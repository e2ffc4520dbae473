"""Progress of a headless run: counts, rate and ETA, one line every N seconds.

`ProgressMeter` is sans-I/O: it is told the time (shared-clock ns) and the statuses of the
finished rollouts, and returns a line when one is due (never more often than `interval_s`,
never per chunk). The rate is finished rollouts per minute since the first rollout started
(rollouts skipped on resume are not counted in it); the ETA is the rollouts left at that
rate, None until one has finished. With rollouts in parallel the rate is per run, not per
rollout: the ETA is honest for a fleet of similar rollouts and rough for mixed lengths.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rig.clock.base import Clock
from rig.core.units import NS_PER_S


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


class ProgressMeter:
    def __init__(self, total: int, start_ns: int, *, interval_s: float = 10.0, skipped: int = 0):
        self.total = total
        self.skipped = skipped
        self.start_ns = start_ns
        self.interval_ns = round(max(interval_s, 0.1) * NS_PER_S)
        self._next_ns = start_ns + self.interval_ns

    @property
    def next_ns(self) -> int:
        """When the next line is due."""
        return self._next_ns

    def line(self, now_ns: int, statuses: Iterable[str], *, force: bool = False) -> str | None:
        """The progress line if one is due at `now_ns` (or `force`), else None."""
        if not force and now_ns < self._next_ns:
            return None
        self._next_ns = now_ns + self.interval_ns
        counts = Counter(statuses)
        done = sum(counts.values())
        fresh = max(0, done - self.skipped)
        elapsed_s = (now_ns - self.start_ns) / NS_PER_S
        left = max(0, self.total - done)
        parts = [f"progress: {done}/{self.total} rollouts done"]
        if counts:
            parts.append("(" + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) + ")")
        parts.append(f"elapsed {_duration(elapsed_s)}")
        if fresh and elapsed_s > 0:
            per_min = fresh / elapsed_s * 60
            parts.append(f"rate {per_min:.1f}/min")
            parts.append(f"ETA {_duration(left / per_min * 60)}" if left else "ETA 0s")
        else:
            parts.append("rate -, ETA -")
        return " ".join(parts)


async def progress_lines(
    results: Mapping[str, Mapping[str, Any]],
    total: int,
    skipped: int,
    clock: Clock,
    interval_s: float,
    emit: Callable[[str], None],
) -> None:
    """Emit a progress line every `interval_s` (clock time) until cancelled; `results` is
    the runner's finished rollouts (id -> metrics), read, never changed. 0 s: no lines."""
    if interval_s <= 0:
        return
    meter = ProgressMeter(total, clock.now_ns(), interval_s=interval_s, skipped=skipped)
    while True:
        await clock.sleep_until(meter.next_ns)
        line = meter.line(clock.now_ns(), (str(m.get("status", "?")) for m in results.values()))
        if line is not None:
            emit(line)
