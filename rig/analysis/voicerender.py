"""The reply voice table of `rig report`: each reply's level against the system's own
median, and its whisper verdict (rig.analysis.voicereport builds the numbers)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text


def _f(x: Any, nd: int = 1, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.{nd}f}" if signed else f"{x:.{nd}f}"


def _yes(x: Any) -> str:
    return "-" if x is None else ("yes" if x else "no")


def shown(report: dict[str, Any]) -> bool:
    """A run with conditions, or with a whispered reply: plain runs keep their report."""
    v = report.get("voice") or {}
    rows = v.get("replies") or []
    return bool(rows) and any(r.get("condition") or r.get("whisper") for r in rows)


def render_voice(report: dict[str, Any]) -> Any:
    """A rich Table, or None when the run has nothing to show (`shown`)."""
    if not shown(report):
        return None
    v = report["voice"]
    ref = v.get("reference_dbfs")
    rows = v["replies"]
    rules = " | ".join(sorted({str(r.get("whisper_rule")) for r in rows}))
    t = Table(
        title=Text(
            f"reply voice: level vs the system's median {_f(ref)} dBFS ({v['reference_from']}); "
            f"whisper = {rules}"
        ),
        title_justify="left",
    )
    for col in ("reply", "condition", "dBFS", "rel dB", "lower", "HNR dB", "voiced", "whisper"):
        t.add_column(col, justify="left" if col in ("reply", "condition") else "right")
    if any(r.get("words_per_s") is not None for r in rows):
        t.add_column("words/s", justify="right")
    wps = len(t.columns) == 9
    for r in rows:
        name = f"{r['rollout_id']}:{r['turn']}" + (f" {r['label']}" if r.get("label") else "")
        cells: list[Text | str] = [
            Text(name),
            Text(r.get("condition") or "-"),
            _f(r.get("rms_dbfs")),
            _f(r.get("rel_db"), signed=True),
            _yes(r.get("lowered")),
            _f(r.get("hnr_db")),
            _f(r.get("voiced_fraction"), 2),
            _yes(r.get("whisper")),
        ]
        if wps:
            cells.append(_f(r.get("words_per_s"), 2))
        t.add_row(*cells)
    w, lo = v["whisper"], v["lowered"]
    t.caption = Text(
        f"whispered {w['passed']}/{w['evaluated']} replies; lowered {lo['passed']}/"
        f"{lo['evaluated']} replies to conditioned turns"
        + ("" if "measured" in v["measured"] or not v["measured"] else f" ({v['measured'][0]})")
    )
    t.caption_justify = "left"
    return t
