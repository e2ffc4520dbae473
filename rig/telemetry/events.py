"""Telemetry events: what a running rollout tells the bus (and the bus tells the dashboard).

How this works: every event is one frozen `TelemetryEvent(kind, run_id, rollout_id, t_ns,
data)`. `t_ns` is on the shared monotonic clock; `data` is a small JSON-able dict whose keys
depend on `kind` (documented in `KINDS` and in docs/telemetry.md). The constructors below
(`status(...)`, `chunk(...)`, ...) are the supported way to build events, so field names stay
consistent between the session, the reducer and the MQTT bridge. Events are plain data: no
clock reads, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

#: Version of the event schema; MQTT and view-feed payloads carry it as `"v"`. Version 2 added
#: the `run` and `rtt` kinds and optional fields (status: dialect, transport, timing_valid,
#: timing_reason; chunk: stall; chunk_batch: n_stalls). Readers accept every version listed in
#: `READABLE_VERSIONS` (a version-1 stream is a version-2 stream without the additions).
#: Version 3 added, for dashboards people already run (Telegraf, Grafana): the envelope's
#: wall-clock `epoch_ns` (MQTT) and the scalar `lateness_max_ns` / `lateness_mean_ns` beside
#: `chunk_batch.lateness_ns`, so every number a chart wants is a flat scalar.
SCHEMA_VERSION: Final = 3
READABLE_VERSIONS: Final = frozenset({1, 2, 3})

Kind = Literal[
    "status", "chunk", "chunk_batch", "activity", "protocol", "clock", "response", "run", "rtt"
]

#: Every kind and the fields of its `data` (name -> meaning). The docs are generated from this.
KINDS: Final[dict[str, dict[str, str]]] = {
    "status": {
        "state": "lifecycle state: pending, connecting, running, draining, done",
        "status": "outcome once done (ok, error, timeout, cancelled...); null before",
        "reason": "human-readable reason for the outcome or state change; may be null",
        "target": "what the rollout talks to: host[:port] or device name (never credentials, "
        "paths or queries); optional",
        "dialect": "how the rig speaks to it (rig, openai, gemini, ...); optional (v2)",
        "transport": "ws, webrtc or device; optional (v2)",
        "timing_valid": "done only: true/false once the rig has judged its own timing for this "
        "rollout (pacing, loop and writer kept up), null or absent when not judged (v2)",
        "timing_reason": "why the timing is not valid, or null (v2)",
    },
    "chunk": {
        "dir": "up (sent by the rig) or down (received from the system)",
        "seq": "chunk sequence number in that direction",
        "n_samples": "samples in the chunk",
        "lateness_ns": "uplink: actual send time minus pacer deadline; null for downlink",
        "level_dbfs": "RMS level of the chunk in dBFS; null if not measured",
        "stall": "uplink: the pacer counted this chunk as a stall (more than one frame late); "
        "optional (v2; without it readers apply their own threshold)",
    },
    "chunk_batch": {
        "dir": "up or down",
        "seq_first": "first chunk seq in the batch",
        "seq_last": "last chunk seq in the batch",
        "n_chunks": "number of chunks coalesced",
        "n_samples": "total samples",
        "lateness_ns": "list of uplink lateness values (ns), one per chunk; [] for downlink",
        "level_dbfs": "loudest chunk level in the batch (dBFS) or null",
        "n_stalls": "uplink chunks in the batch the pacer counted as stalls; optional (v2)",
        "lateness_max_ns": "uplink: the largest lateness of the batch's chunks (ns); absent "
        "without lateness values (v3)",
        "lateness_mean_ns": "uplink: the mean lateness of the batch's chunks (ns, rounded); "
        "absent without lateness values (v3)",
    },
    "activity": {
        "track": "up (user track) or down (system track)",
        "speech": "true when speech starts, false when it stops",
    },
    "protocol": {
        "name": "protocol event name (e.g. session.created, response.done, barge_in)",
        "fields": "small dict of extra fields from the protocol message",
    },
    "clock": {
        "offset_ms": "fitted offset of the peer clock minus the shared clock (ms) or null",
        "drift_ppm": "fitted drift of the peer clock (parts per million) or null",
        "rtt_ms": "latest round-trip time (ms) or null",
        "source": "whose clock: server or device:<id>",
    },
    "response": {
        "latency_ms": "end of user speech to first system audio (ms)",
        "uplink_ms": "share spent on the uplink network, or null if not separable",
        "model_ms": "share spent in the system (server clock), or null",
        "downlink_ms": "share spent on the downlink network, or null",
        "queue_ms": "share spent in local buffering/playback, or null",
        "detect_ms": "endpointing: user's end as it reached the system -> its decision, or null",
        "generation_ms": "the system's decision -> first reply audio leaving it, or null",
        "placement": "which placement the latency used (arrival, playback, server)",
        "live": "true when seen as it happened (turn end to onset as played), before the "
        "analysis; the final event of that response, with its split, follows",
    },
    "run": {
        "total": "rollouts this run will stream (rollout_id is empty for run events) (v2)",
        "skipped": "rollouts already done in the run directory (resume), not streamed again",
        "concurrency": "rollouts streamed at once, or null",
    },
    "rtt": {
        "rtt_ms": "a round-trip time to the rollout's target (ms) (v2)",
        "method": "how it was measured (probe, ping, tcp_info, clock_fit ...)",
        "target": "with an empty rollout_id: every rollout whose status target equals this",
    },
}

STATES: Final = ("pending", "connecting", "running", "draining", "done")
Direction = Literal["up", "down"]


@dataclass(frozen=True, slots=True)
class TelemetryEvent:
    """One thing a rollout reports. `t_ns` is on the shared monotonic clock."""

    kind: str
    run_id: str
    rollout_id: str
    t_ns: int
    data: dict[str, Any] = field(default_factory=dict)
    v: int = SCHEMA_VERSION


def status(
    run_id: str,
    rollout_id: str,
    t_ns: int,
    state: str,
    *,
    status: str | None = None,
    reason: str | None = None,
    target: str | None = None,
    dialect: str | None = None,
    transport: str | None = None,
    timing_valid: bool | None = None,
    timing_reason: str | None = None,
) -> TelemetryEvent:
    """A lifecycle change. `state` must be one of STATES (a typo is a bug, so it raises).

    The optional fields are sent only when given, so a status stays small."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}; expected one of {STATES}")
    data: dict[str, Any] = {"state": state, "status": status, "reason": reason}
    for key, value in (
        ("target", target),
        ("dialect", dialect),
        ("transport", transport),
        ("timing_valid", timing_valid),
        ("timing_reason", timing_reason),
    ):
        if value is not None:
            data[key] = value
    return TelemetryEvent("status", run_id, rollout_id, t_ns, data)


def chunk(
    run_id: str,
    rollout_id: str,
    t_ns: int,
    dir: Direction,
    seq: int,
    n_samples: int,
    *,
    lateness_ns: int | None = None,
    level_dbfs: float | None = None,
    stall: bool | None = None,
) -> TelemetryEvent:
    """One audio chunk sent (up) or received (down); the session publishes one per chunk."""
    data: dict[str, Any] = {
        "dir": dir,
        "seq": seq,
        "n_samples": n_samples,
        "lateness_ns": lateness_ns,
        "level_dbfs": level_dbfs,
    }
    if stall is not None:
        data["stall"] = stall
    return TelemetryEvent("chunk", run_id, rollout_id, t_ns, data)


def activity(
    run_id: str, rollout_id: str, t_ns: int, track: Direction, speech: bool
) -> TelemetryEvent:
    """Speech started (`speech=True`) or stopped on one track."""
    return TelemetryEvent("activity", run_id, rollout_id, t_ns, {"track": track, "speech": speech})


def protocol(
    run_id: str, rollout_id: str, t_ns: int, name: str, fields: dict[str, Any] | None = None
) -> TelemetryEvent:
    """A protocol event worth showing in the recent-events list."""
    return TelemetryEvent(
        "protocol", run_id, rollout_id, t_ns, {"name": name, "fields": dict(fields or {})}
    )


def clock(
    run_id: str,
    rollout_id: str,
    t_ns: int,
    *,
    offset_ms: float | None = None,
    drift_ppm: float | None = None,
    rtt_ms: float | None = None,
    source: str = "server",
) -> TelemetryEvent:
    """A clock measurement: a new RTT probe result and/or a new fit of the peer clock."""
    return TelemetryEvent(
        "clock",
        run_id,
        rollout_id,
        t_ns,
        {"offset_ms": offset_ms, "drift_ppm": drift_ppm, "rtt_ms": rtt_ms, "source": source},
    )


def response(
    run_id: str,
    rollout_id: str,
    t_ns: int,
    latency_ms: float,
    *,
    uplink_ms: float | None = None,
    model_ms: float | None = None,
    downlink_ms: float | None = None,
    queue_ms: float | None = None,
    placement: str = "arrival",
    detect_ms: float | None = None,
    generation_ms: float | None = None,
    live: bool = False,
) -> TelemetryEvent:
    """One system response's latency and, where the clock fit supports it, its split;
    `live`: seen as it happened, before the analysis (its final event follows)."""
    data: dict[str, Any] = {
        "latency_ms": latency_ms,
        "uplink_ms": uplink_ms,
        "model_ms": model_ms,
        "downlink_ms": downlink_ms,
        "queue_ms": queue_ms,
        "placement": placement,
        "detect_ms": detect_ms,
        "generation_ms": generation_ms,
        "live": live,
    }
    return TelemetryEvent("response", run_id, rollout_id, t_ns, data)


def run(
    run_id: str, t_ns: int, total: int, *, skipped: int = 0, concurrency: int | None = None
) -> TelemetryEvent:
    """What a run is about to do: how many rollouts, how many at once (the fleet band's total
    and ETA). Run-level, so `rollout_id` is empty."""
    return TelemetryEvent(
        "run", run_id, "", t_ns, {"total": total, "skipped": skipped, "concurrency": concurrency}
    )


def rtt(
    run_id: str,
    rollout_id: str,
    t_ns: int,
    rtt_ms: float,
    *,
    method: str,
    target: str | None = None,
) -> TelemetryEvent:
    """A round-trip time to a target. Per rollout, or (empty `rollout_id`, `target` given) for
    every rollout talking to that target, as a per-host ping or TCP_INFO measurement is."""
    data: dict[str, Any] = {"rtt_ms": rtt_ms, "method": method}
    if target is not None:
        data["target"] = target
    return TelemetryEvent("rtt", run_id, rollout_id, t_ns, data)
