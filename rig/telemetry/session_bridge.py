"""Turns a session's `publish(kind, data)` calls into bus events.

The session knows nothing of the bus: it calls a plain function, and this module maps its
kinds onto `rig.telemetry.events` constructors. O(1), never raises into the audio loop.
Every status event carries the rollout's target (redacted host, dialect, transport), so a
view that joins late or lost an event still fills its target column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from rig.clock.base import Clock
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


def session_publisher(
    bus: EventBus,
    run_id: str,
    clock: Clock,
    target: str | None = None,
    targets: Mapping[str, Mapping[str, str]] | None = None,
) -> Callable[[str], Callable[[str, dict[str, Any]], None]]:
    """A factory: rollout id -> publish function for that rollout's session.

    `targets`: rollout id -> `target_fields(...)`; `target`: one target string for all."""

    def for_rollout(rollout_id: str) -> Callable[[str, dict[str, Any]], None]:
        where: dict[str, Any] = dict((targets or {}).get(rollout_id) or {})
        if target is not None and "target" not in where:
            where["target"] = target

        def publish(kind: str, data: dict[str, Any]) -> None:
            t = int(data.get("t_ns") or clock.now_ns())
            if kind == "chunk":
                bus.publish(
                    ev.chunk(
                        run_id,
                        rollout_id,
                        t,
                        data["dir"],
                        data["seq"],
                        data["n_samples"],
                        lateness_ns=data.get("lateness_ns"),
                        level_dbfs=data.get("level_dbfs"),
                        stall=data.get("stall"),
                    )
                )
            elif kind == "status":
                state = _STATE.get(str(data.get("state")), "running")
                bus.publish(
                    ev.status(
                        run_id,
                        rollout_id,
                        t,
                        state,
                        status=data.get("status"),
                        reason=data.get("reason"),
                        timing_valid=data.get("timing_valid"),
                        timing_reason=data.get("timing_reason"),
                        **where,
                    )
                )
            elif kind == "protocol":
                bus.publish(
                    ev.protocol(
                        run_id,
                        rollout_id,
                        t,
                        str(data.get("name")),
                        {k: v for k, v in data.items() if k not in ("name", "t_ns")},
                    )
                )
            elif kind == "response":
                bus.publish(
                    ev.response(
                        run_id,
                        rollout_id,
                        t,
                        float(data["latency_ms"]),
                        uplink_ms=data.get("uplink_ms"),
                        model_ms=data.get("model_ms"),
                        downlink_ms=data.get("downlink_ms"),
                        queue_ms=data.get("queue_ms"),
                        detect_ms=data.get("detect_ms"),
                        generation_ms=data.get("generation_ms"),
                        placement=str(data.get("placement", "playback")),
                        live=bool(data.get("live")),
                    )
                )
            elif kind == "clock":
                bus.publish(
                    ev.clock(
                        run_id,
                        rollout_id,
                        t,
                        offset_ms=data.get("offset_ms"),
                        drift_ppm=data.get("drift_ppm"),
                        rtt_ms=data.get("rtt_ms"),
                    )
                )
            elif kind == "rtt":
                bus.publish(
                    ev.rtt(
                        run_id,
                        rollout_id,
                        t,
                        float(data["rtt_ms"]),
                        method=str(data.get("method", "probe")),
                    )
                )
            elif kind == "activity":
                bus.publish(ev.activity(run_id, rollout_id, t, data["track"], bool(data["speech"])))

        return publish

    return for_rollout
