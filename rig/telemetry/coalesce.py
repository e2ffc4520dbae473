"""Chunk coalescing (pure): per-chunk telemetry events in, at most one `chunk_batch` per
rollout and direction per period out.

Why: a rollout sends 50 chunks a second each way; the MQTT publisher and the view feed both
fold them into batches (seq range, counts, the most recent lateness values, the loudest
level, the pacer's stall count) so what leaves the process scales with rollouts, not chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rig.telemetry.events import TelemetryEvent

if TYPE_CHECKING:
    from rig.telemetry.bus import Subscription

MAX_BATCH_LATENESS = 500  # lateness values kept per chunk_batch (the most recent)


class _Pending:
    __slots__ = (
        "run_id",
        "seq_first",
        "seq_last",
        "n",
        "samples",
        "lateness",
        "level",
        "t_ns",
        "stalls",
        "late_max",
        "late_sum",
        "late_n",
    )

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.seq_first = -1
        self.seq_last = -1
        self.n = 0
        self.samples = 0
        self.lateness: list[int] = []
        self.level: float | None = None
        self.t_ns = 0
        self.stalls: int | None = None  # None: no chunk carried the pacer's stall flag
        # over every chunk of the batch (the list keeps only the most recent values)
        self.late_max = 0
        self.late_sum = 0
        self.late_n = 0


class ChunkCoalescer:
    """Per-chunk events in, at most one `chunk_batch` per rollout and direction per period."""

    def __init__(self, period_ns: int) -> None:
        self.period_ns = period_ns
        self._pending: dict[tuple[str, str, str], _Pending] = {}
        self._last_flush: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, ev: TelemetryEvent) -> None:
        d = ev.data
        self.add_fields(
            ev.run_id,
            ev.rollout_id,
            ev.t_ns,
            str(d.get("dir")),
            int(d.get("seq", -1)),
            int(d.get("n_samples", 0)),
            d.get("lateness_ns"),
            d.get("level_dbfs"),
            d.get("stall"),
        )

    def add_fields(
        self,
        run_id: str,
        rollout_id: str,
        t_ns: int,
        direction: str,
        seq: int,
        n_samples: int,
        lateness_ns: int | None,
        level_dbfs: float | None,
        stall: bool | None,
    ) -> None:
        """`add` of a chunk given as its fields (`EventBus.publish_chunk`: no event made)."""
        key = (run_id, rollout_id, direction)
        p = self._pending.get(key)
        if p is None:
            p = self._pending[key] = _Pending(run_id)
            p.seq_first = seq
        p.seq_last = seq
        p.n += 1
        p.samples += n_samples
        p.t_ns = t_ns
        if lateness_ns is not None:
            late = int(lateness_ns)
            p.lateness.append(late)
            p.late_max = late if p.late_n == 0 else max(p.late_max, late)
            p.late_sum += late
            p.late_n += 1
            if len(p.lateness) > 2 * MAX_BATCH_LATENESS:
                del p.lateness[:-MAX_BATCH_LATENESS]
        if stall is not None:
            p.stalls = (p.stalls or 0) + bool(stall)
        if level_dbfs is not None and (p.level is None or level_dbfs > p.level):
            p.level = float(level_dbfs)

    def fold_from(self, sub: Subscription, max_n: int | None = None) -> list[TelemetryEvent]:
        """Drain up to `max_n` events of `sub` (all if None): chunk events folded here, the
        others returned in order. The one drain loop of the bus's forwarding consumers (the
        MQTT publisher, the view feed in both of its modes)."""
        out: list[TelemetryEvent] = []
        for ev in sub.drain(max_n):
            if ev.kind == "chunk":
                self.add(ev)
            else:
                out.append(ev)
        return out

    def flush(self, now_ns: int, force: bool = False) -> list[TelemetryEvent]:
        """Batches for rollouts whose last flush is at least one period old (all if force)."""
        return list(self.iter_flush(now_ns, force))

    def iter_flush(self, now_ns: int, force: bool = False) -> Iterator[TelemetryEvent]:
        """`flush` one batch at a time, so a caller on a busy loop can yield in between (chunks
        added meanwhile wait for the next flush)."""
        for key in list(self._pending):
            run_id, rollout_id, direction = key
            last = self._last_flush.get((run_id, rollout_id))
            if not force and last is not None and now_ns - last < self.period_ns:
                continue
            p = self._pending.pop(key, None)
            if p is None:
                continue
            self._last_flush[(run_id, rollout_id)] = now_ns
            data = {
                "dir": direction,
                "seq_first": p.seq_first,
                "seq_last": p.seq_last,
                "n_chunks": p.n,
                "n_samples": p.samples,
                "lateness_ns": p.lateness[-MAX_BATCH_LATENESS:],
                "level_dbfs": p.level,
            }
            if p.stalls is not None:
                data["n_stalls"] = p.stalls
            if p.late_n:
                data["lateness_max_ns"] = p.late_max
                data["lateness_mean_ns"] = round(p.late_sum / p.late_n)
            yield TelemetryEvent("chunk_batch", run_id, rollout_id, p.t_ns, data)
