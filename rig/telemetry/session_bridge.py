"""Turns a session's typed live records (rig.core.live) into bus events.

The session knows nothing of the bus: it calls a plain function with a frozen record, and
this module maps each record type onto its `rig.telemetry.events` constructor by a table
(`CONVERT`). O(1), never raises into the audio loop.
Every status event carries the rollout's target (redacted host, dialect, transport), so a
view that joins late or lost an event still fills its target column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from rig.clock.base import Clock
from rig.core.live import (
    LiveActivity,
    LiveChunk,
    LiveClock,
    LiveEvent,
    LiveProtocol,
    LiveResponse,
    LiveRtt,
    LiveStatus,
)
from rig.telemetry import events as ev
from rig.telemetry.bus import EventBus

_STATE = {"connecting": "connecting", "running": "running", "draining": "draining", "done": "done"}


def target_host(url: str) -> str:
    """`host[:port]` of a URL: never the userinfo, path or query (tokens travel there)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "?"
    if not host:
        return "?"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def target_fields(target: Mapping[str, Any]) -> dict[str, str]:
    """Status fields for a rollout spec's `target` dict (`{"url", "transport", "dialect"}` or a
    sound card's `{"transport": "device", "output", ...}`): what the view's target column shows."""
    out: dict[str, str] = {}
    transport = target.get("transport")
    if isinstance(transport, str):
        out["transport"] = transport
    if transport == "device":
        name = target.get("output") or target.get("input")
        out["target"] = str(name) if name else "device"
    elif isinstance(target.get("url"), str):
        out["target"] = target_host(target["url"])
    dialect = target.get("dialect")
    if isinstance(dialect, str):
        out["dialect"] = dialect
    return out


#: one converter per live record type (rig.core.live) -> its bus event (rig.telemetry.events)
_Where = dict[str, Any]
_Convert = Callable[[str, str, int, Any, _Where], ev.TelemetryEvent]


def _status(run_id: str, rid: str, t: int, e: LiveStatus, where: _Where) -> ev.TelemetryEvent:
    state = _STATE.get(e.state, "running")
    return ev.status(
        run_id,
        rid,
        t,
        state,
        status=e.status,
        reason=e.reason,
        timing_valid=e.timing_valid,
        timing_reason=e.timing_reason,
        **where,
    )


def _chunk(run_id: str, rid: str, t: int, e: LiveChunk, where: _Where) -> ev.TelemetryEvent:
    return ev.chunk(
        run_id,
        rid,
        t,
        e.dir,
        e.seq,
        e.n_samples,
        lateness_ns=e.lateness_ns,
        level_dbfs=e.level_dbfs,
        stall=e.stall,
    )


def _protocol(run_id: str, rid: str, t: int, e: LiveProtocol, where: _Where) -> ev.TelemetryEvent:
    return ev.protocol(run_id, rid, t, e.name, {})


def _response(run_id: str, rid: str, t: int, e: LiveResponse, where: _Where) -> ev.TelemetryEvent:
    return ev.response(
        run_id,
        rid,
        t,
        float(e.latency_ms),
        uplink_ms=e.uplink_ms,
        model_ms=e.model_ms,
        downlink_ms=e.downlink_ms,
        queue_ms=e.queue_ms,
        detect_ms=e.detect_ms,
        generation_ms=e.generation_ms,
        placement=e.placement,
        live=e.live,
    )


def _clock(run_id: str, rid: str, t: int, e: LiveClock, where: _Where) -> ev.TelemetryEvent:
    return ev.clock(run_id, rid, t, offset_ms=e.offset_ms, drift_ppm=e.drift_ppm, rtt_ms=e.rtt_ms)


def _rtt(run_id: str, rid: str, t: int, e: LiveRtt, where: _Where) -> ev.TelemetryEvent:
    return ev.rtt(run_id, rid, t, float(e.rtt_ms), method=str(e.method or "probe"))


def _activity(run_id: str, rid: str, t: int, e: LiveActivity, where: _Where) -> ev.TelemetryEvent:
    return ev.activity(run_id, rid, t, e.track, bool(e.speech))


CONVERT: dict[type[Any], _Convert] = {
    LiveStatus: _status,
    LiveChunk: _chunk,
    LiveProtocol: _protocol,
    LiveResponse: _response,
    LiveClock: _clock,
    LiveRtt: _rtt,
    LiveActivity: _activity,
}


def session_publisher(
    bus: EventBus,
    run_id: str,
    clock: Clock,
    target: str | None = None,
    targets: Mapping[str, Mapping[str, str]] | None = None,
) -> Callable[[str], Callable[[LiveEvent], None]]:
    """A factory: rollout id -> publish function for that rollout's session.

    `targets`: rollout id -> `target_fields(...)`; `target`: one target string for all.
    Each function's `listening()` says whether the bus has a subscriber now: a headless run
    without MQTT has none, and the session then builds no chunk view per frame (a level
    measured on the event loop, three objects: ~5 µs a frame at 200 rollouts)."""

    def for_rollout(rollout_id: str) -> Callable[[LiveEvent], None]:
        where: dict[str, Any] = dict((targets or {}).get(rollout_id) or {})
        if target is not None and "target" not in where:
            where["target"] = target
        return RolloutPublish(bus, run_id, rollout_id, clock, where)

    return for_rollout


class RolloutPublish:
    """One rollout's publish function (see `session_publisher`)."""

    __slots__ = ("_bus", "_clock", "_rid", "_run_id", "_where")

    def __init__(
        self, bus: EventBus, run_id: str, rollout_id: str, clock: Clock, where: _Where
    ) -> None:
        self._bus, self._run_id, self._rid = bus, run_id, rollout_id
        self._clock, self._where = clock, where

    def __call__(self, event: LiveEvent) -> None:
        convert = CONVERT.get(type(event))
        if convert is None:
            return
        t = int(event.t_ns or self._clock.now_ns())
        self._bus.publish(convert(self._run_id, self._rid, t, event, self._where))

    def listening(self) -> bool:
        return bool(self._bus.subscriptions)

    def chunk(
        self,
        direction: ev.Direction,
        seq: int,
        n_samples: int,
        t_ns: int,
        lateness_ns: int | None,
        level_dbfs: float | None,
    ) -> None:
        """`self(LiveChunk(...))` without the LiveChunk or, for a subscriber that folds
        chunks, the event (`EventBus.publish_chunk`): a watched run's per-frame path."""
        t = int(t_ns or self._clock.now_ns())
        self._bus.publish_chunk(
            self._run_id, self._rid, t, direction, seq, n_samples, lateness_ns, level_dbfs
        )
