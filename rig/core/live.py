"""What a rollout tells live views while it runs: one frozen record per kind.

Why typed: the sink (rig.recordings.sink) builds these from the records it writes, and the
bridge to the bus (rig.telemetry.session_bridge) turns each type into a telemetry event by a
table, not by matching strings; a field added here is a field every side sees. Plain data:
no clock reads, no I/O. `t_ns` None: stamped by the bridge when it publishes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal


@dataclass(frozen=True, slots=True)
class LiveStatus:
    kind: ClassVar[str] = "status"
    state: str  # connecting, running, draining, done
    status: str | None = None  # the outcome, once done
    reason: str | None = None
    timing_valid: bool | None = None
    timing_reason: str | None = None
    t0_ns: int | None = None  # running: the session timeline's origin
    t_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LiveChunk:
    kind: ClassVar[str] = "chunk"
    dir: Literal["up", "down"]
    seq: int
    n_samples: int
    t_ns: int
    lateness_ns: int | None = None  # up only
    play_ns: int | None = None  # down only: where the listener plays it
    level_dbfs: float | None = None
    stall: bool | None = None


@dataclass(frozen=True, slots=True)
class LiveProtocol:
    kind: ClassVar[str] = "protocol"
    name: str
    t_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LiveResponse:
    kind: ClassVar[str] = "response"
    latency_ms: float
    turn: int | None = None
    placement: str = "playback"
    uplink_ms: float | None = None
    model_ms: float | None = None
    downlink_ms: float | None = None
    queue_ms: float | None = None
    detect_ms: float | None = None
    generation_ms: float | None = None
    #: seen as it happened (turn end to onset as played, rig.core.liveresponse), before
    #: the analysis; its final record, with the split, follows
    live: bool = False
    t_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LiveClock:
    kind: ClassVar[str] = "clock"
    offset_ms: float | None = None
    drift_ppm: float | None = None
    rtt_ms: float | None = None
    t_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LiveRtt:
    kind: ClassVar[str] = "rtt"
    rtt_ms: float
    method: str | None = None
    t_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LiveActivity:
    kind: ClassVar[str] = "activity"
    track: Literal["up", "down"]
    speech: bool
    t_ns: int | None = None


LiveEvent = (
    LiveStatus | LiveChunk | LiveProtocol | LiveResponse | LiveClock | LiveRtt | LiveActivity
)


def fields_of(event: LiveEvent) -> dict[str, Any]:
    """The record as a dict (its fields; None values kept)."""
    return asdict(event)
