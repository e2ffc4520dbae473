"""The reply voice measures of a whole run: levels relative to the system's own, verdicts.

Why apart from rig.analysis.voice: a reply's level *relative to the system's median speech
level in the run* needs every rollout. The reference is the median RMS of the replies to
turns without an input condition (rig.conditions) when the run has any, else of all
replies (`reference_from` says which): a whispered request is compared with how the system
speaks when nothing was asked of it. A reply is `lowered` when its RMS is below
`lowered_ratio` (0.7, InteractionBench's) of the reference, as amplitude: -3.1 dB.
Replies come from rollouts whose status the report counts and whose timing held.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rig.analysis.stats import median, rate

Row = dict[str, Any]


def _conditions_by_turn(m: dict[str, Any]) -> dict[int, dict[str, Any]]:
    c = m.get("conditions")
    turns = c.get("turns") if isinstance(c, dict) else None
    out: dict[int, dict[str, Any]] = {}
    for t in turns if isinstance(turns, list) else []:
        if isinstance(t, dict) and isinstance(t.get("turn"), int):
            out[t["turn"]] = t
    return out


SHORT = {"gain_db": "gain {:+g} dB", "target_rms_dbfs": "rms {:g}", "target_peak_dbfs": "peak {:g}",
         "target_lufs": "{:g} LUFS"}  # fmt: skip


def _describe(cond: dict[str, Any] | None) -> str:
    """`rms -35 pink 5dB phone` (empty: none): short enough for a report column."""
    if not cond:
        return ""
    parts = []
    for k, v in cond.items():
        if k == "noise" and isinstance(v, dict):
            parts.append(f"{v.get('kind')} {v.get('snr_db'):g}dB")
        elif k == "line" and isinstance(v, dict):
            kind = v.get("kind")
            loss = v.get("loss")
            parts.append(f"lossy {100 * loss:g}%" if kind == "lossy" and loss else str(kind))
        elif k in SHORT and isinstance(v, int | float):
            parts.append(SHORT[k].format(v))
        else:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def reply_rows(rollouts: Iterable[Any]) -> list[Row]:
    """One row per reply of the given rollouts (rig.analysis.aggregate.RolloutMetrics)."""
    rows = []
    for r in rollouts:
        m = r.metrics
        t = m.get("timing")
        voice = t.get("voice") if isinstance(t, dict) else None
        if not isinstance(voice, dict):
            continue
        raw_params, raw_rules = t.get("params"), voice.get("rules")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        rules: dict[str, Any] = raw_rules if isinstance(raw_rules, dict) else {}
        rule = (
            f"HNR < {rules.get('whisper_hnr_max_db', 6.0):g} dB and voiced < "
            f"{rules.get('whisper_voiced_max', 0.4):g}"
        )
        conds = _conditions_by_turn(m)
        labels = [x.get("label") for x in (m.get("turns") or []) if isinstance(x, dict)]
        for rep in voice.get("replies") or []:
            if not isinstance(rep, dict):
                continue
            turn = rep.get("turn")
            cond = conds.get(turn) if isinstance(turn, int) else None
            rows.append(
                {
                    "rollout_id": r.rollout_id,
                    "scenario": m.get("scenario"),
                    "item": m.get("item"),
                    "turn": turn,
                    "label": (cond or {}).get("label")
                    or (labels[turn] if isinstance(turn, int) and turn < len(labels) else None),
                    "condition": _describe((cond or {}).get("condition")),
                    **{k: rep.get(k) for k in ("rms_dbfs", "hnr_db", "voiced_fraction")},
                    "whisper": rep.get("whisper"),
                    "words_per_s": rep.get("words_per_s"),
                    "lowered_ratio": float(params.get("lowered_ratio", 0.7)),
                    "whisper_rule": rule,
                    "status": voice.get("status"),
                }
            )
    return rows


def with_reference(rows: list[Row]) -> tuple[list[Row], float | None, str]:
    """Rows with `rel_db` and `lowered`, the reference level and where it came from."""
    neutral = [r["rms_dbfs"] for r in rows if r["rms_dbfs"] is not None and not r["condition"]]
    every = [r["rms_dbfs"] for r in rows if r["rms_dbfs"] is not None]
    conditioned = any(r["condition"] for r in rows)
    if conditioned and neutral:
        ref, source = median(neutral), "replies to turns without a condition"
    else:
        ref, source = median(every), "all replies"
    out = []
    for r in rows:
        rel = None if ref is None or r["rms_dbfs"] is None else round(r["rms_dbfs"] - ref, 2)
        lowered = None if rel is None else bool(10 ** (rel / 20) < r["lowered_ratio"])
        out.append({**r, "rel_db": rel, "lowered": lowered})
    return out, (None if ref is None else round(ref, 2)), source


def voice_summary(rollouts: Iterable[Any], confidence: float = 0.95) -> dict[str, Any]:
    """The report's `voice` block: every reply, the reference, whisper and lowered rates."""
    rows, ref, source = with_reference(reply_rows(rollouts))
    whispers = [r["whisper"] for r in rows if isinstance(r["whisper"], bool)]
    lowered = [r["lowered"] for r in rows if isinstance(r["lowered"], bool) and r["condition"]]
    rel = [r["rel_db"] for r in rows if r["rel_db"] is not None and r["condition"]]
    statuses = sorted({str(r["status"]) for r in rows if r["status"]})
    return {
        "n_replies": len(rows),
        "reference_dbfs": ref,
        "reference_from": source,
        "measured": statuses,
        "whisper": rate(sum(whispers), len(whispers), confidence),
        # over replies to conditioned turns: did the system lower its voice when asked to
        "lowered": rate(sum(lowered), len(lowered), confidence),
        "conditioned_rel_db_median": None if not rel else round(float(median(rel) or 0.0), 2),
        "replies": rows,
    }


def has_conditions(rollouts: Iterable[Any]) -> bool:
    return any(isinstance(r.metrics.get("conditions"), dict) for r in rollouts)


def finite(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None
