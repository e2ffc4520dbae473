"""Field checks for telemetry events that arrive from outside the process (sans-I/O).

Why: anyone who can publish on the broker feeds `rig watch`. The reducer trusts the shapes
that `rig.telemetry.events` builds (`int(n_chunks)`, `float(rtt_ms)`...); a payload with
`{"n_chunks": "x"}` would raise inside the dashboard pump. `check(kind, data)` refuses, with a
`ProtocolError` naming the field, any event whose known fields have the wrong type or an
absurd size, so what reaches the bus is what the rig itself would have published. Unknown
kinds pass (forward compatible): the reducer only lists them as text. Schema v2's kinds
(`run`, `rtt`) and fields (status dialect/transport/timing_valid/timing_reason, chunk stall,
chunk_batch n_stalls) are checked like the rest.
"""

from __future__ import annotations

import math
from typing import Any

from rig.errors import ProtocolError

MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 4096
MAX_LATENESS_VALUES = 10_000
MAX_COUNT = 10**9
MAX_INT64 = 2**63


def _int(data: dict[str, Any], key: str, *, lo: int = -MAX_INT64, hi: int = MAX_INT64) -> None:
    v = data.get(key)
    if v is None:
        return
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ProtocolError(
            f"telemetry {key}: expected an integer in [{lo}, {hi}], got {v!r}"[:200]
        )


def _num(data: dict[str, Any], key: str) -> None:
    v = data.get(key)
    if v is None:
        return
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        raise ProtocolError(f"telemetry {key}: expected a number, got {v!r}"[:200])
    if abs(v) > 1e15:
        raise ProtocolError(f"telemetry {key}: {v!r} is out of range")


def _text(data: dict[str, Any], key: str, limit: int = MAX_TEXT_CHARS) -> None:
    v = data.get(key)
    if v is None:
        return
    if not isinstance(v, str) or len(v) > limit:
        raise ProtocolError(f"telemetry {key}: expected text of at most {limit} chars"[:200])


def _bool(data: dict[str, Any], key: str) -> None:
    v = data.get(key)
    if v is not None and not isinstance(v, bool):
        raise ProtocolError(f"telemetry {key}: expected true or false, got {v!r}"[:200])


def check_epoch(epoch_ns: Any) -> None:
    """The v3 envelope's wall-clock time: absent, or an int64 (ns since 1970)."""
    if epoch_ns is not None and (
        not isinstance(epoch_ns, int) or isinstance(epoch_ns, bool) or abs(epoch_ns) >= MAX_INT64
    ):
        raise ProtocolError(f"telemetry epoch_ns: expected an int64, got {epoch_ns!r}"[:200])


def check_header(kind: Any, run_id: Any, rollout_id: Any, t_ns: Any) -> tuple[str, str, str, int]:
    """The envelope: short string ids, an int64 time; returned typed."""
    for name, v, limit in (("kind", kind, 64), ("run", run_id, MAX_ID_CHARS)):
        if not isinstance(v, str) or len(v) > limit:
            raise ProtocolError(f"telemetry {name}: expected text of at most {limit} chars")
    if not isinstance(rollout_id, str) or len(rollout_id) > MAX_ID_CHARS:
        raise ProtocolError(f"telemetry rollout: expected text of at most {MAX_ID_CHARS} chars")
    if not isinstance(t_ns, int) or isinstance(t_ns, bool) or abs(t_ns) >= MAX_INT64:
        raise ProtocolError(f"telemetry t_ns: expected an int64, got {t_ns!r}"[:200])
    return kind, run_id, rollout_id, t_ns


def check(kind: str, data: dict[str, Any]) -> None:
    """Raise ProtocolError if a known kind's fields have the wrong type or size."""
    if kind == "status":
        _text(data, "state", 64)
        for key in ("status", "reason", "target", "timing_reason"):
            _text(data, key)
        for key in ("dialect", "transport"):
            _text(data, key, 64)
        _bool(data, "timing_valid")
    elif kind in ("chunk", "chunk_batch"):
        _text(data, "dir", 16)
        for key in ("seq", "seq_first", "seq_last"):
            _int(data, key)
        for key in ("n_chunks", "n_samples", "n_stalls"):
            _int(data, key, lo=0, hi=MAX_COUNT)
        for key in ("lateness_max_ns", "lateness_mean_ns"):
            _int(data, key)
        _bool(data, "stall")
        _num(data, "level_dbfs")
        late = data.get("lateness_ns")
        if kind == "chunk":
            _int(data, "lateness_ns")
        elif late is not None:
            if not isinstance(late, list) or len(late) > MAX_LATENESS_VALUES:
                raise ProtocolError("telemetry lateness_ns: expected a list of integers")
            for x in late:
                if not isinstance(x, int) or isinstance(x, bool) or abs(x) >= MAX_INT64:
                    raise ProtocolError("telemetry lateness_ns: expected a list of integers")
    elif kind == "activity":
        _text(data, "track", 16)
        _bool(data, "speech")
    elif kind == "protocol":
        _text(data, "name", 256)
        if data.get("fields") is not None and not isinstance(data["fields"], dict):
            raise ProtocolError("telemetry fields: expected an object")
    elif kind == "clock":
        for key in ("offset_ms", "drift_ppm", "rtt_ms"):
            _num(data, key)
        _text(data, "source", 256)
    elif kind == "response":
        if data.get("latency_ms") is None:
            raise ProtocolError("telemetry latency_ms: required")
        for key in (
            "latency_ms",
            "uplink_ms",
            "model_ms",
            "downlink_ms",
            "queue_ms",
            "detect_ms",
            "generation_ms",
        ):
            _num(data, key)
        _text(data, "placement", 64)
    elif kind == "run":
        for key in ("total", "skipped", "concurrency"):
            _int(data, key, lo=0, hi=MAX_COUNT)
    elif kind == "rtt":
        _num(data, "rtt_ms")
        _text(data, "method", 64)
        _text(data, "target")
