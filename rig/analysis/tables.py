"""A run directory as tidy tables: one row per rollout, response, chunk, event, word.

`load_tables(run_dir)` reads what `rig report` reads (metrics.json per rollout through
`load_run`, which never fails on one bad rollout) plus chunks.jsonl and events.jsonl, and
returns `RunTables`: pandas DataFrames when pandas is installed (the `analysis` extra),
plain lists of dicts otherwise. Columns are plain scalars (nested values flattened with
dots, lists as JSON text), so a table goes to CSV and back without post-processing.
Fields other issues add (timing_valid, RTT, the network split) appear when a run has them;
an item's tags are `tag.NAME` columns of the rollouts and responses tables, and the
reference marks are `kind == "mark"` rows of the events table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.analysis.aggregate import RolloutMetrics, load_run
from rig.analysis.rollout import read_jsonl
from rig.analysis.scorerows import SCORE_COLUMNS, load_score_rows
from rig.analysis.verdicts import verdict_of
from rig.analysis.voicereport import reply_rows, with_reference
from rig.extras import missing_module, require

Row = dict[str, Any]

#: rollouts.csv / the rollouts table: these first, in this order; any other scalar after
ROLLOUT_COLUMNS: tuple[str, ...] = (
    "rollout_id", "scenario", "item", "kind", "repeat", "status", "reason", "pass", "verdict",
    "timing_valid", "timing_reason", "retries", "n_responses", "latency_median_ms",
    "latency_max_ms", "uplink_frames", "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms",
    "stalls", "drift_ms", "downlink_chunks", "downlink_audio_s", "clock_method", "clock_drift_ppm",
    "clock_offset_err_ms", "rtt_p50_ms", "rule", "t0_ns",
)  # fmt: skip
#: responses.csv / the responses table: one row per user turn with its latency split
RESPONSE_COLUMNS: tuple[str, ...] = (
    "rollout_id", "scenario", "item", "repeat", "rollout_status", "turn", "latency_ms",
    "latency_arrival_ms", "placement", "clock_method", "uplink_ms", "uplink_err_ms",
    "model_ms", "model_err_ms", "downlink_ms", "downlink_err_ms", "queue_ms", "queue_err_ms",
    "detect_ms", "user_end_ns", "onset_ns", "timing_valid",
)  # fmt: skip


@dataclass(frozen=True)
class RunTables:
    """Tables of one run (DataFrames with pandas, else lists of dicts) and its manifest."""

    run_dir: Path
    manifest: dict[str, Any] | None
    rollouts: Any
    responses: Any
    chunks: Any
    events: Any
    words: Any
    scores: Any = None
    """scores.json as one row per scorer, group and metric (rig.analysis.scorerows)."""
    #: one row per reply: level, level relative to the system's median, HNR, voicing,
    #: whisper and lowered verdicts, words/s (rig.analysis.voicereport)
    voice: Any = None


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return json.dumps(v, separators=(",", ":"), allow_nan=False, default=str)


def flatten(obj: dict[str, Any], prefix: str = "") -> Row:
    """Nested dicts -> dotted keys; lists -> JSON text (one plain value per column)."""
    out: Row = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = _scalar(v)
    return out


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d if d is None or isinstance(d, str | int | float | bool) else None


def timing_reason(m: dict[str, Any]) -> str | None:
    """Why the rig's own timing did not hold (metrics `rig_timing.reasons`), or None."""
    rt = m.get("rig_timing")
    reasons = rt.get("reasons") if isinstance(rt, dict) else None
    if isinstance(reasons, list) and reasons:
        return "; ".join(str(r) for r in reasons)
    return None


def _verdict(m: dict[str, Any]) -> bool | None:
    v = m.get("pass")
    if v is None:
        v = _get(m, "timing", "pass")
    return v if isinstance(v, bool) else None


def rollout_row(r: RolloutMetrics) -> Row:
    m = r.metrics
    lat = [
        float(x["latency_ms"])
        for x in (m.get("responses") or [])
        if isinstance(x, dict) and isinstance(x.get("latency_ms"), int | float)
    ]
    lat.sort()
    row: Row = {
        "rollout_id": r.rollout_id,
        "scenario": _get(m, "scenario"),
        "item": _get(m, "item"),
        "kind": _get(m, "kind"),
        "repeat": _get(m, "repeat"),
        "status": r.status,
        "reason": _get(m, "reason") or r.problem,
        "pass": _verdict(m),
        "verdict": verdict_of(m),  # pass / fail / n/a (the rule cannot tell) / None (no rule)
        "timing_valid": _get(m, "timing_valid"),
        "timing_reason": timing_reason(m),
        "retries": r.retries,
        "n_responses": len(lat),
        "latency_median_ms": (lat[len(lat) // 2] + lat[(len(lat) - 1) // 2]) / 2 if lat else None,
        "latency_max_ms": lat[-1] if lat else None,
        "uplink_frames": _get(m, "uplink", "frames"),
        "lateness_p50_ms": _get(m, "uplink", "lateness_ms", "p50"),
        "lateness_p99_ms": _get(m, "uplink", "lateness_ms", "p99"),
        "lateness_max_ms": _get(m, "uplink", "lateness_ms", "max"),
        "stalls": _get(m, "uplink", "stalls"),
        "drift_ms": _get(m, "uplink", "drift_ms"),
        "downlink_chunks": _get(m, "downlink", "chunks"),
        "downlink_audio_s": _get(m, "downlink", "audio_s"),
        "clock_method": _get(m, "clock_fit", "method"),
        "clock_drift_ppm": _get(m, "clock_fit", "drift_ppm"),
        "clock_offset_err_ms": _get(m, "clock_fit", "offset_err_ms"),
        "rtt_p50_ms": _get(m, "clock_fit", "rtt", "rtt_p50_ms"),
        "rule": _get(m, "timing", "rule"),
        "t0_ns": _get(m, "t0_ns"),
        "censored": _get(m, "censored"),
        "n_marks": len(m["marks"]) if isinstance(m.get("marks"), list) else None,
        **tag_columns(m),
    }
    return row


def tag_columns(m: dict[str, Any]) -> Row:
    """An item's tags as `tag.NAME` columns (what `rig report --by NAME` groups by)."""
    tags = m.get("tags")
    if not isinstance(tags, dict):
        return {}
    return {f"tag.{k}": v if isinstance(v, str) else _scalar(v) for k, v in sorted(tags.items())}


def response_rows(r: RolloutMetrics) -> list[Row]:
    m = r.metrics
    rows = []
    for resp in m.get("responses") or []:
        if not isinstance(resp, dict):
            continue
        row: Row = {
            "rollout_id": r.rollout_id,
            "scenario": _get(m, "scenario"),
            "item": _get(m, "item"),
            "repeat": _get(m, "repeat"),
            "rollout_status": r.status,
            "timing_valid": _get(m, "timing_valid"),
            **tag_columns(m),
        }
        flat = flatten(resp)
        row.update({k: flat.get(k) for k in RESPONSE_COLUMNS if k not in row})
        row.update({k: v for k, v in sorted(flat.items()) if k not in row})  # errors, RTT, ...
        rows.append(row)
    return rows


def _file_rows(run_dir: Path, rollout_id: str, name: str) -> list[Row]:
    return [
        {"rollout_id": rollout_id, **flatten(obj)}
        for obj in read_jsonl(run_dir / "rollouts" / rollout_id / name)
    ]


def load_rows(run_dir: str | Path, *, chunks: bool = True) -> dict[str, Any]:
    """The tables as lists of dicts (no pandas): rollouts, responses, chunks, events, words."""
    data = load_run(run_dir)
    out: dict[str, Any] = {
        "run_dir": data.run_dir,
        "manifest": data.manifest,
        "rollouts": [rollout_row(r) for r in data.rollouts],
        "responses": [row for r in data.rollouts for row in response_rows(r)],
        "chunks": [],
        "events": [],
        "words": [],
        "scores": load_score_rows(data.run_dir),
        "voice": with_reference(reply_rows(data.rollouts))[0],
    }
    for r in data.rollouts:
        if chunks:
            out["chunks"] += _file_rows(data.run_dir, r.rollout_id, "chunks.jsonl")
        out["events"] += _file_rows(data.run_dir, r.rollout_id, "events.jsonl")
        out["words"] += _file_rows(data.run_dir, r.rollout_id, "words.jsonl")
    return out


def _frame(rows: list[Row], columns: tuple[str, ...] = ()) -> Any:
    import pandas as pd

    order = list(columns) + sorted({k for row in rows for k in row} - set(columns))
    return pd.DataFrame.from_records(rows, columns=order if rows or columns else None)


def load_tables(
    run_dir: str | Path, *, frames: bool | None = None, chunks: bool = True
) -> RunTables:
    """A run's tidy tables: DataFrames when pandas is installed (or `frames=True`, which
    then needs it), lists of dicts otherwise (or `frames=False`). `chunks=False` skips the
    per-chunk table (the big one: 50 rows per second of audio per direction)."""
    rows = load_rows(run_dir, chunks=chunks)
    if frames is None:
        frames = missing_module("analysis") is None
    if frames:
        require("analysis", "rig.load_run(..., frames=True)")
        return RunTables(
            rows["run_dir"],
            rows["manifest"],
            _frame(rows["rollouts"], ROLLOUT_COLUMNS),
            _frame(rows["responses"], RESPONSE_COLUMNS),
            _frame(rows["chunks"]),
            _frame(rows["events"]),
            _frame(rows["words"]),
            _frame(rows["scores"], SCORE_COLUMNS),
            _frame(rows["voice"]),
        )
    return RunTables(
        rows["run_dir"],
        rows["manifest"],
        rows["rollouts"],
        rows["responses"],
        rows["chunks"],
        rows["events"],
        rows["words"],
        rows["scores"],
        rows["voice"],
    )
