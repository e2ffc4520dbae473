"""Turns a session's `publish(kind, data)` calls into bus events.

The session knows nothing of the bus: it calls a plain function, and this module maps its
kinds onto `rig.telemetry.events` constructors. O(1), never raises into the audio loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rig.clock.base import Clock
from rig.telemetry import events as ev
from rig.telemetry.bus import EventBus

_STATE = {"connecting": "connecting", "running": "running", "draining": "draining", "done": "done"}


def session_publisher(
    bus: EventBus, run_id: str, clock: Clock, target: str | None = None
) -> Callable[[str], Callable[[str, dict[str, Any]], None]]:
    """A factory: rollout id -> publish function for that rollout's session."""

    def for_rollout(rollout_id: str) -> Callable[[str, dict[str, Any]], None]:
        first = [True]

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
                        target=target if first[0] else None,
                    )
                )
                first[0] = False
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
                        placement=str(data.get("placement", "playback")),
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
            elif kind == "activity":
                bus.publish(ev.activity(run_id, rollout_id, t, data["track"], bool(data["speech"])))

        return publish

    return for_rollout
