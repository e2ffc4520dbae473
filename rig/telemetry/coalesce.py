"""Chunk coalescing (pure): per-chunk telemetry events in, at most one `chunk_batch` per
rollout and direction per period out.

Why: a rollout sends 50 chunks a second each way; the MQTT publisher and the view feed both
fold them into batches (seq range, counts, the most recent lateness values, the loudest
level, the pacer's stall count) so what leaves the process scales with rollouts, not chunks.
"""

from __future__ import annotations

from collections.abc import Iterator

from rig.telemetry.events import TelemetryEvent

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
        key = (ev.run_id, ev.rollout_id, str(d.get("dir")))
        p = self._pending.get(key)
        if p is None:
            p = self._pending[key] = _Pending(ev.run_id)
            p.seq_first = int(d.get("seq", -1))
        p.seq_last = int(d.get("seq", -1))
        p.n += 1
        p.samples += int(d.get("n_samples", 0))
        p.t_ns = ev.t_ns
        if d.get("lateness_ns") is not None:
            p.lateness.append(int(d["lateness_ns"]))
            if len(p.lateness) > 2 * MAX_BATCH_LATENESS:
                del p.lateness[:-MAX_BATCH_LATENESS]
        stall = d.get("stall")
        if stall is not None:
            p.stalls = (p.stalls or 0) + bool(stall)
        lv = d.get("level_dbfs")
        if lv is not None and (p.level is None or lv > p.level):
            p.level = float(lv)

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
            yield TelemetryEvent("chunk_batch", run_id, rollout_id, p.t_ns, data)
