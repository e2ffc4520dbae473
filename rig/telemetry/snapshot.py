"""Reducer: telemetry events in, frozen fleet/rollout snapshots out.

How this works: `Reducer.apply(event)` folds one event into small per-rollout state (O(1)
amortized: bounded deques and counters). `Reducer.snapshot(now_ns)` freezes that state into
a `FleetSnapshot` of `RolloutSnapshot`s that renderers and the headless printer read without
locks: a snapshot never changes after it is made. Windowed statistics (send lateness p50/p99,
peak levels) are computed at snapshot time from events inside the window ending at `now_ns`.
Raw `chunk` events and the coalesced `chunk_batch` events (MQTT bridge, view feed) reduce to
the same state, so every view shows the same numbers. Run-level events (`run`, and `rtt` for a
whole target) carry an empty rollout id and never make a row. The fleet band's numbers come
from `rig.telemetry.fleet.summarize` over the frozen rollouts.

Pure: no clock reads, no I/O; `now_ns` comes in as an argument.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rig.core.units import NS_PER_MS, NS_PER_S
from rig.telemetry.events import TelemetryEvent
from rig.telemetry.fleet import FleetSummary, LatencySample, RunInfo, summarize
from rig.telemetry.speech import gate_level, speaking, strip

RESPONSE_PARTS = ("uplink_ms", "model_ms", "downlink_ms", "queue_ms", "detect_ms", "generation_ms")


@dataclass(frozen=True, slots=True)
class ReducerConfig:
    """Display policy: windows and thresholds (recorded so the docs can say what is shown)."""

    lateness_window_ns: int = 5 * NS_PER_S  # p50/p99 of uplink lateness over this window
    level_window_ns: int = 300 * NS_PER_MS  # level meters show the peak over this window
    stall_threshold_ns: int = 20 * NS_PER_MS  # an uplink chunk this late counts as a stall
    timeline_span_ns: int = 30 * NS_PER_S  # the activity strip covers this much history
    timeline_cells: int = 60
    recent_events: int = 8
    #: rollouts tracked at most (a broker can carry any number of ids): past it, the oldest
    #: finished rollout is forgotten; with none finished, events of new rollouts are refused
    max_rollouts: int = 2048
    #: runs and per-target RTTs tracked at most (new ones past it are refused, counted)
    max_runs: int = 64
    #: response latencies kept for the band's p50/p95: past it, a uniform sample of them
    #: (reservoir sampling, seeded), so memory stays bounded and the percentiles unbiased
    max_latencies: int = 65_536


@dataclass(frozen=True, slots=True)
class ResponseView:
    latency_ms: float
    uplink_ms: float | None
    model_ms: float | None
    downlink_ms: float | None
    queue_ms: float | None
    placement: str
    detect_ms: float | None = None  # endpointing wait (part of model_ms)
    generation_ms: float | None = None
    live: bool = False  # seen as it happened; the split comes with the analysis


@dataclass(frozen=True, slots=True)
class RecentEvent:
    t_ns: int
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class RolloutSnapshot:
    """Everything the dashboard shows for one rollout, frozen at `FleetSnapshot.t_ns`."""

    run_id: str
    rollout_id: str
    target: str | None
    state: str
    status: str | None
    reason: str | None
    elapsed_s: float | None
    chunks_up: int
    chunks_down: int
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    stalls: int
    rtt_ms: float | None
    clock_offset_ms: float | None
    clock_drift_ppm: float | None
    last_response: ResponseView | None
    n_responses: int
    up_level_dbfs: float | None
    down_level_dbfs: float | None
    up_speech: bool
    down_speech: bool
    #: one bool per cell, oldest first: was there speech in that cell? () if not computed
    up_timeline: tuple[bool, ...]
    down_timeline: tuple[bool, ...]
    recent: tuple[RecentEvent, ...]
    dialect: str | None = None
    transport: str | None = None
    #: the rig's verdict on its own timing for this rollout; None until judged
    timing_valid: bool | None = None
    timing_reason: str | None = None
    rtt_method: str | None = None
    #: measured round trips (ms), oldest first, at most RTT_HISTORY: RTT over time
    rtt_history_ms: tuple[float, ...] = ()

    @property
    def failed(self) -> bool:
        """Done with an outcome other than ok."""
        return self.state == "done" and self.status not in (None, "ok")


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    t_ns: int
    run_ids: tuple[str, ...]
    rollouts: tuple[RolloutSnapshot, ...]
    state_counts: dict[str, int] = field(default_factory=dict)
    events_applied: int = 0
    events_dropped: int = 0
    timeline_span_ns: int = 30 * NS_PER_S
    summary: FleetSummary = field(default_factory=FleetSummary)

    def rollout(self, rollout_id: str) -> RolloutSnapshot | None:
        for r in self.rollouts:
            if r.rollout_id == rollout_id:
                return r
        return None


class _Track:
    __slots__ = ("levels", "speech", "transitions", "count", "last_loud_ns", "explicit")

    def __init__(self) -> None:
        self.levels: deque[tuple[int, float]] = deque(maxlen=256)
        self.speech = False
        self.transitions: deque[tuple[int, bool]] = deque(maxlen=512)
        self.count = 0
        self.last_loud_ns: int | None = None  # speech from levels (rig.telemetry.speech)
        self.explicit = False  # speech from activity events instead


class _Rollout:
    def __init__(self, run_id: str, rollout_id: str, recent_n: int) -> None:
        self.run_id = run_id
        self.rollout_id = rollout_id
        self.target: str | None = None
        self.state = "pending"
        self.status: str | None = None
        self.reason: str | None = None
        self.first_t_ns: int | None = None
        self.start_ns: int | None = None  # first connecting/running
        self.end_ns: int | None = None
        self.dialect: str | None = None
        self.transport: str | None = None
        self.timing_valid: bool | None = None
        self.timing_reason: str | None = None
        self.lateness: deque[tuple[int, int]] = deque(maxlen=4096)
        self.stalls = 0
        self.rtt: tuple[int, float, str] | None = None  # (t_ns, rtt_ms, method)
        self.rtt_history: deque[float] = deque(maxlen=RTT_HISTORY)  # live samples only
        self.offset_ms: float | None = None
        self.drift_ppm: float | None = None
        self.response: ResponseView | None = None
        self.n_responses = 0
        self.live_pending = 0  # responses shown live whose final event has not come yet
        self.up = _Track()
        self.down = _Track()
        self.recent: deque[RecentEvent] = deque(maxlen=recent_n)


#: round trips kept per rollout for the view's RTT-over-time line (one a second: a minute)
RTT_HISTORY = 60


def _fmt_fields(d: dict[str, Any], limit: int = 60) -> str:
    text = " ".join(f"{k}={v}" for k, v in d.items() if v is not None)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _percentile(sorted_vals: list[int], q: float) -> int:
    # nearest-rank percentile: the smallest value with at least q of the data at or below it
    idx = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


class Reducer:
    """Folds telemetry events into per-rollout display state. See the module docstring."""

    def __init__(self, config: ReducerConfig | None = None) -> None:
        self.config = config or ReducerConfig()
        self._rollouts: dict[tuple[str, str], _Rollout] = {}
        self._runs: dict[str, RunInfo] = {}
        self._target_rtt: dict[tuple[str, str], tuple[int, float, str]] = {}
        self._latencies = LatencySample(self.config.max_latencies)  # every response's
        self.applied = 0
        self.dropped = 0  # set by whoever feeds us (subscription/bridge drops)
        self.evicted = 0  # finished rollouts forgotten to stay under max_rollouts
        self._done: dict[tuple[str, str], None] = {}  # finished rollouts, oldest first
        self.refused = 0  # events of new rollouts refused (max_rollouts, none finished)

    def _get(self, ev: TelemetryEvent) -> _Rollout | None:
        key = (ev.run_id, ev.rollout_id)
        r = self._rollouts.get(key)
        if r is None:
            if len(self._rollouts) >= self.config.max_rollouts and not self._evict_one():
                self.refused += 1
                return None
            r = self._rollouts[key] = _Rollout(ev.run_id, ev.rollout_id, self.config.recent_events)
        if r.first_t_ns is None:
            r.first_t_ns = ev.t_ns
        return r

    def _evict_one(self) -> bool:
        """Forget the rollout that finished first (O(1)); False if none is finished."""
        if not self._done:
            return False
        key = next(iter(self._done))
        del self._done[key]
        self._rollouts.pop(key, None)
        self.evicted += 1
        return True

    def apply(self, ev: TelemetryEvent) -> None:
        """Fold one event in. Unknown kinds are kept as recent events (forward compatible)."""
        self.applied += 1
        d = ev.data
        kind = ev.kind
        if not ev.rollout_id:  # run-level: never a row
            self._run_level(ev)
            return
        r = self._get(ev)
        if r is None:
            return
        if kind == "chunk":
            stall = d.get("stall")
            self._chunk(r, ev.t_ns, d.get("dir"), 1, d.get("lateness_ns"), d.get("level_dbfs"))
            if d.get("lateness_ns") is not None:
                self._stall(r, int(d["lateness_ns"]), None if stall is None else int(bool(stall)))
        elif kind == "chunk_batch":
            lat = d.get("lateness_ns") or []
            self._chunk(r, ev.t_ns, d.get("dir"), int(d.get("n_chunks", 0)), None, None)
            n_stalls = d.get("n_stalls")
            for x in lat:
                self._lateness(r, ev.t_ns, int(x))
                if n_stalls is None:
                    self._stall(r, int(x), None)
            if n_stalls is not None:
                r.stalls += int(n_stalls)
            self._level(r, ev.t_ns, d.get("dir"), d.get("level_dbfs"))
        elif kind == "status":
            self._status(r, ev)
        elif kind == "activity":
            track = r.up if d.get("track") == "up" else r.down
            if not track.explicit:  # activity events replace what the levels suggested
                track.explicit, track.speech = True, False
                track.transitions.clear()
            speech = bool(d.get("speech"))
            if speech != track.speech:
                track.speech = speech
                track.transitions.append((ev.t_ns, speech))
            self._recent(r, ev, f"{d.get('track')} speech {'on' if speech else 'off'}")
        elif kind == "clock":
            if d.get("rtt_ms") is not None:
                self._rtt(r, ev.t_ns, float(d["rtt_ms"]), "clock fit")
            if d.get("offset_ms") is not None:
                r.offset_ms = float(d["offset_ms"])
            if d.get("drift_ppm") is not None:
                r.drift_ppm = float(d["drift_ppm"])
        elif kind == "response":
            r.response = ResponseView(
                latency_ms=float(d.get("latency_ms", 0.0)),
                placement=str(d.get("placement", "arrival")),
                **{k: d.get(k) for k in RESPONSE_PARTS},
                live=bool(d.get("live")),
            )
            if not d.get("live") and r.live_pending:  # the final form of one seen live
                r.live_pending -= 1
                return
            r.live_pending += bool(d.get("live"))
            r.n_responses += 1
            self._latencies.add(r.response.latency_ms)
            self._recent(r, ev, f"response {r.response.latency_ms:.0f} ms")
        elif kind == "rtt":
            if d.get("rtt_ms") is not None:
                self._rtt(r, ev.t_ns, float(d["rtt_ms"]), str(d.get("method") or "rtt"))
                r.rtt_history.append(float(d["rtt_ms"]))
        elif kind == "protocol":
            fields = d.get("fields") or {}
            extra = _fmt_fields(fields) if isinstance(fields, dict) else str(fields)
            self._recent(r, ev, f"{d.get('name')} {extra}".rstrip())
        else:
            self._recent(r, ev, _fmt_fields(d))

    def _chunk(
        self,
        r: _Rollout,
        t_ns: int,
        direction: Any,
        n: int,
        lateness_ns: Any,
        level: Any,
    ) -> None:
        track = r.up if direction == "up" else r.down
        track.count += n
        if lateness_ns is not None:
            self._lateness(r, t_ns, int(lateness_ns))
        self._level(r, t_ns, direction, level)

    def _lateness(self, r: _Rollout, t_ns: int, lateness_ns: int) -> None:
        r.lateness.append((t_ns, lateness_ns))

    def _stall(self, r: _Rollout, lateness_ns: int, flagged: int | None) -> None:
        """The pacer's own verdict when the event carries one, else the display threshold."""
        if flagged is not None:
            r.stalls += flagged
        elif lateness_ns > self.config.stall_threshold_ns:
            r.stalls += 1

    @staticmethod
    def _rtt(r: _Rollout, t_ns: int, rtt_ms: float, method: str) -> None:
        if r.rtt is None or t_ns >= r.rtt[0]:
            r.rtt = (t_ns, rtt_ms, method)

    def _run_level(self, ev: TelemetryEvent) -> None:
        d = ev.data
        if ev.kind == "run":
            if ev.run_id not in self._runs and len(self._runs) >= self.config.max_runs:
                self.refused += 1
                return
            conc = d.get("concurrency")
            self._runs[ev.run_id] = RunInfo(
                run_id=ev.run_id,
                t_ns=ev.t_ns,
                total=int(d.get("total") or 0),
                skipped=int(d.get("skipped") or 0),
                concurrency=int(conc) if conc is not None else None,
            )
        elif ev.kind == "rtt" and d.get("target") and d.get("rtt_ms") is not None:
            key = (ev.run_id, str(d["target"]))
            if key not in self._target_rtt and len(self._target_rtt) >= self.config.max_runs:
                self.refused += 1
                return
            self._target_rtt[key] = (ev.t_ns, float(d["rtt_ms"]), str(d.get("method") or "rtt"))

    def _level(self, r: _Rollout, t_ns: int, direction: Any, level: Any) -> None:
        if level is not None:
            track = r.up if direction == "up" else r.down
            track.levels.append((t_ns, float(level)))
            gate_level(track, t_ns, float(level))

    def _status(self, r: _Rollout, ev: TelemetryEvent) -> None:
        d = ev.data
        state = str(d.get("state", r.state))
        if r.state == "done" and state in ("connecting", "running"):
            r = self._again(r)  # `--retry-invalid`: the row shows the new attempt
        if d.get("target") is not None:
            r.target = str(d["target"])
        if d.get("dialect") is not None:
            r.dialect = str(d["dialect"])
        if d.get("transport") is not None:
            r.transport = str(d["transport"])
        if "timing_valid" in d:
            tv = d["timing_valid"]
            r.timing_valid = None if tv is None else bool(tv)
            r.timing_reason = None if d.get("timing_reason") is None else str(d["timing_reason"])
        if state in ("connecting", "running") and r.start_ns is None:
            r.start_ns = ev.t_ns
        key = (r.run_id, r.rollout_id)
        if state == "done":
            r.end_ns = ev.t_ns
            self._done.pop(key, None)
            self._done[key] = None  # finished last: forgotten last
        else:
            self._done.pop(key, None)
        r.state = state
        r.status = d.get("status")
        r.reason = d.get("reason")
        text = state + (f" {r.status}" if r.status else "") + (f": {r.reason}" if r.reason else "")
        self._recent(r, ev, text)

    def _again(self, r: _Rollout) -> _Rollout:
        """A finished rollout started again (its own timing was not valid): a fresh row, so
        the new attempt's stalls and verdict are not added to the old one's; the recent
        events are kept."""
        fresh = _Rollout(r.run_id, r.rollout_id, self.config.recent_events)
        fresh.recent = r.recent
        fresh.first_t_ns = r.first_t_ns
        fresh.target, fresh.dialect, fresh.transport = r.target, r.dialect, r.transport
        key = (r.run_id, r.rollout_id)
        self._done.pop(key, None)
        self._rollouts[key] = fresh
        return fresh

    def _recent(self, r: _Rollout, ev: TelemetryEvent, text: str) -> None:
        r.recent.append(RecentEvent(ev.t_ns, ev.kind, text))

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self, now_ns: int, timelines: Iterable[str] | None = None) -> FleetSnapshot:
        """Freeze the current state as seen at `now_ns`.

        `timelines`: rollout ids whose activity strips are computed (None: all). The strips
        are the costly part and only the detail panel shows them.
        """
        return self.assemble(now_ns, list(self.freeze_each(now_ns, timelines)))

    def freeze_each(
        self, now_ns: int, timelines: Iterable[str] | None = None
    ) -> Iterator[RolloutSnapshot]:
        """One frozen rollout at a time, so a caller on a busy loop can yield in between."""
        wanted = None if timelines is None else frozenset(timelines)
        for r in list(self._rollouts.values()):
            yield self._freeze(r, now_ns, wanted is None or r.rollout_id in wanted)

    def assemble(self, now_ns: int, rollouts: list[RolloutSnapshot]) -> FleetSnapshot:
        """The fleet snapshot made of `rollouts` (from `freeze_each`)."""
        counts: dict[str, int] = {}
        for ro in rollouts:
            counts[ro.state] = counts.get(ro.state, 0) + 1
        runs = tuple(dict.fromkeys([*self._runs, *(r.run_id for r in rollouts)]))
        return FleetSnapshot(
            t_ns=now_ns,
            run_ids=runs,
            rollouts=tuple(rollouts),
            state_counts=counts,
            events_applied=self.applied,
            events_dropped=self.dropped,
            timeline_span_ns=self.config.timeline_span_ns,
            summary=summarize(
                rollouts,
                list(self._runs.values()),
                self._latencies.sorted_ms,
                now_ns,
                n_responses=self._latencies.n,
            ),
        )

    def _freeze(self, r: _Rollout, now_ns: int, strips: bool) -> RolloutSnapshot:
        cfg, n_cells = self.config, self.config.timeline_cells
        cutoff = now_ns - cfg.lateness_window_ns
        while r.lateness and r.lateness[0][0] <= cutoff:
            r.lateness.popleft()
        lat = sorted(x for t, x in r.lateness if t <= now_ns)
        p50 = _percentile(lat, 0.5) / NS_PER_MS if lat else None
        p99 = _percentile(lat, 0.99) / NS_PER_MS if lat else None
        start = r.start_ns
        elapsed = None
        if start is not None:
            elapsed = ((r.end_ns if r.end_ns is not None else now_ns) - start) / NS_PER_S
        rtt = r.rtt
        if r.target is not None:
            host = self._target_rtt.get((r.run_id, r.target))
            if host is not None and (rtt is None or host[0] > rtt[0]):
                rtt = host
        return RolloutSnapshot(
            run_id=r.run_id,
            rollout_id=r.rollout_id,
            target=r.target,
            state=r.state,
            status=r.status,
            reason=r.reason,
            elapsed_s=elapsed,
            chunks_up=r.up.count,
            chunks_down=r.down.count,
            lateness_p50_ms=p50,
            lateness_p99_ms=p99,
            stalls=r.stalls,
            rtt_ms=None if rtt is None else rtt[1],
            clock_offset_ms=r.offset_ms,
            clock_drift_ppm=r.drift_ppm,
            last_response=r.response,
            n_responses=r.n_responses,
            up_level_dbfs=self._peak(r.up, now_ns),
            down_level_dbfs=self._peak(r.down, now_ns),
            up_speech=speaking(r.up, now_ns),
            down_speech=speaking(r.down, now_ns),
            up_timeline=strip(r.up, now_ns, cfg.timeline_span_ns, n_cells) if strips else (),
            down_timeline=strip(r.down, now_ns, cfg.timeline_span_ns, n_cells) if strips else (),
            recent=tuple(r.recent),
            dialect=r.dialect,
            transport=r.transport,
            timing_valid=r.timing_valid,
            timing_reason=r.timing_reason,
            rtt_method=None if rtt is None else rtt[2],
            rtt_history_ms=tuple(r.rtt_history),
        )

    def _peak(self, track: _Track, now_ns: int) -> float | None:
        cutoff = now_ns - self.config.level_window_ns
        while track.levels and track.levels[0][0] <= cutoff:
            track.levels.popleft()
        vals = [lv for t, lv in track.levels if t <= now_ns]
        return max(vals) if vals else None
