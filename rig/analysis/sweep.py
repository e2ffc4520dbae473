"""Settings side by side: what `rig run --sweep` varied, and what it changed.

Why: a shorter end-of-turn silence answers faster and cuts in on the user's pauses more; the
two are only weighed against each other when one table shows, per setting, the endpointing
wait (`detect_ms`), generation, latency and the turn-taking outcome (cut-ins on pause items,
takeovers mid-turn, overlap, pass rate of the items' rules). The per-setting groups are made
by rig.analysis.aggregate; this module sums the turn-taking side and draws the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text


def turn_taking(metrics: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Turn-taking counts over rollouts' `timing` (two-track analysis, rig.analysis.timing)."""
    pauses = cut_ins = takeovers = analysed = 0
    overlap_s = 0.0
    for m in metrics:
        t = m.get("timing")
        if not isinstance(t, dict) or "error" in t:
            continue
        analysed += 1
        p = t.get("pauses")
        pauses += len(p) if isinstance(p, list) else 0
        n = t.get("pause_takeovers")
        cut_ins += n if isinstance(n, int) and not isinstance(n, bool) else 0
        to = t.get("turn_takeovers")
        takeovers += len(to) if isinstance(to, list) else 0
        ov = t.get("overlap")
        total = ov.get("total_s") if isinstance(ov, dict) else None
        overlap_s += total if isinstance(total, int | float) else 0.0
    return {
        "rollouts_analysed": analysed,
        "pauses": pauses,
        "pause_cut_ins": cut_ins,
        "turn_takeovers": takeovers,
        "overlap_s": round(overlap_s, 3),
    }


def render_settings(report: dict[str, Any]) -> Any:
    """A rich Table, one row per (scenario, setting): detect, generation, latency (median
    [p25–p75]), cut-ins on pauses, takeovers, overlap, pass. None without a sweep."""
    groups = report.get("settings")
    if not groups:
        return None
    t = Table(
        title="settings side by side, ms: median \\[p25–p75]",
        title_justify="left",
    )
    for col in (
        "scenario",
        "setting",
        "n",
        "detect",
        "generation",
        "latency",
        "pause cut-ins",
        "takeovers",
        "overlap s",
        "pass",
    ):
        t.add_column(col, justify="left" if col in ("scenario", "setting") else "right")
    for g in groups:
        comps = g["components"]
        tt = g["turn_taking"]
        p = g["pass"]
        t.add_row(
            Text(str(g["scenario"])),
            Text(str(g["setting"])),
            str(g["n"]),
            _cell(comps.get("detect_ms")),
            _cell(comps.get("generation_ms")),
            _cell(g["latency_ms"]),
            f"{tt['pause_cut_ins']}/{tt['pauses']}" if tt["pauses"] else "-",
            str(tt["turn_takeovers"]),
            f"{tt['overlap_s']:.2f}",
            f"{p['passed']}/{p['evaluated']}" if p["evaluated"] else "-",
        )
    return t


def _cell(v: dict[str, Any] | None) -> str:
    if not v or v.get("median") is None:
        return "n/a"
    return f"{v['median']:.0f} \\[{v.get('p25', 0):.0f}–{v.get('p75', 0):.0f}]"
