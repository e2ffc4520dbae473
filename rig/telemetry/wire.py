"""Telemetry on the wire (pure): topics and JSON payloads, shared by the MQTT bridge and the
view feed.

Why its own module: the view process decodes the same payloads as `rig watch` and must not
need the MQTT bridge (nor aiomqtt) to do it. Topics are `rig/<run>/<rollout>/<kind>` with
`/ + #` replaced by `_` (run-level events have an empty rollout id: `rig/<run>/_/run`).
Payloads are `{"v": 2, "kind", "run", "rollout", "t_ns", "data"}` (docs/telemetry.md);
`decode` reads every version in READABLE_VERSIONS and refuses, with a ProtocolError, anything
oversized, malformed or with fields of the wrong type (rig.safejson, rig.telemetry.validate):
anyone who can publish on a broker feeds it. Status text is redacted before it is encoded.
"""

from __future__ import annotations

import json

from rig.errors import ProtocolError
from rig.redact import redact_text
from rig.safejson import object_remote
from rig.telemetry import validate
from rig.telemetry.events import READABLE_VERSIONS, SCHEMA_VERSION, TelemetryEvent

RETAINED_KINDS = frozenset({"status", "run"})  # the latest one is what a late reader needs
MAX_PAYLOAD_BYTES = 1 << 20  # a telemetry payload is small; anything bigger is refused


def topic_part(name: str) -> str:
    """A string safe as one topic level."""
    out = name.replace("/", "_").replace("+", "_").replace("#", "_")
    return out or "_"


def topic(run_id: str, rollout_id: str, kind: str) -> str:
    return f"rig/{topic_part(run_id)}/{topic_part(rollout_id)}/{topic_part(kind)}"


def subscription_filter(run_id: str | None = None) -> str:
    return f"rig/{topic_part(run_id) if run_id else '+'}/+/+"


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)  # made once: json.dumps with
# arguments builds a new encoder per call, a third of the cost of a small payload


def encode(ev: TelemetryEvent) -> bytes:
    data = ev.data
    if ev.kind == "status":  # the only kind with free text: target URL, reason
        data = {k: redact_text(v) if isinstance(v, str) else v for k, v in data.items()}
    payload = {
        "v": SCHEMA_VERSION,
        "kind": ev.kind,
        "run": ev.run_id,
        "rollout": ev.rollout_id,
        "t_ns": ev.t_ns,
        "data": data,
    }
    return _ENCODER.encode(payload).encode()


def decode(payload: bytes | bytearray | str) -> TelemetryEvent:
    """Parse one payload; ProtocolError for anything that is not a telemetry event of a version
    this rig reads (READABLE_VERSIONS) whose fields have the types the rig publishes
    (rig.telemetry.validate)."""
    obj = object_remote(payload, "telemetry payload", max_bytes=MAX_PAYLOAD_BYTES)
    if obj.get("v") not in READABLE_VERSIONS:
        raise ProtocolError(f"unsupported telemetry schema version {obj.get('v')!r}", obj)
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise ProtocolError("malformed telemetry payload: data is not an object")
    kind, run_id, rollout_id, t_ns = validate.check_header(
        obj.get("kind"), obj.get("run"), obj.get("rollout"), obj.get("t_ns")
    )
    validate.check(kind, data)
    return TelemetryEvent(kind=kind, run_id=run_id, rollout_id=rollout_id, t_ns=t_ns, data=data)
