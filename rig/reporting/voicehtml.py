"""The HTML report's reply voice section: each reply's level against the system's median,
HNR, voicing, the whisper and lowered verdicts (rig.analysis.voicereport's numbers)."""

from __future__ import annotations

from html import escape
from typing import Any


def _cell(x: Any, nd: int = 1, signed: bool = False) -> str:
    if x is None:
        text = "–"
    elif isinstance(x, bool):
        text = "yes" if x else "no"
    elif isinstance(x, int | float):
        text = f"{x:+.{nd}f}" if signed else f"{x:.{nd}f}"
    else:
        text = str(x)
    return f"<td>{escape(text)}</td>"


def voice_section(report: dict[str, Any]) -> list[str]:
    """`<h2>` and table, or nothing when the run has no reply measures."""
    v = report.get("voice") or {}
    rows = v.get("replies") or []
    if not rows:
        return []
    head = ("rollout", "turn", "condition", "RMS dBFS", "rel dB", "lowered", "HNR dB",
            "voiced", "whisper", "words/s")  # fmt: skip
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        label = f"{r.get('turn')} {r.get('label') or ''}".strip()
        out.append(
            "<tr>" + _cell(r.get("rollout_id")) + _cell(label) + _cell(r.get("condition") or "–")
            + _cell(r.get("rms_dbfs")) + _cell(r.get("rel_db"), signed=True)
            + _cell(r.get("lowered")) + _cell(r.get("hnr_db")) + _cell(r.get("voiced_fraction"), 2)
            + _cell(r.get("whisper")) + _cell(r.get("words_per_s"), 2) + "</tr>"
        )  # fmt: skip
    out.append("</table>")
    ref = v.get("reference_dbfs")
    note = (
        f"level relative to the system's median speech level in the run "
        f"({'–' if ref is None else f'{ref:.1f}'} dBFS, {v.get('reference_from')}); whisper: "
        f"{' | '.join(sorted({str(r.get('whisper_rule')) for r in rows}))}"
    )
    return ["<h2>Reply voice</h2>", f"<p class='muted'>{escape(note)}</p>", "".join(out)]
