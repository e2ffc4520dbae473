"""What each rollout's "pass" tested: its rule as stated and what was measured against it.

The aggregate table counts passes; without this a reader of the text report cannot tell
that an interruption item passed because the system stopped 50 ms after the barge-in, or
failed because it was not talking when the user cut in (the rule text of rig.analysis.timing
carries both the threshold and the measured values).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text


def _verdict(m: dict[str, Any]) -> bool | None:
    v = m.get("pass")
    timing = m.get("timing")
    if v is None and isinstance(timing, dict):
        v = timing.get("pass")
    return v if isinstance(v, bool) else None


def _yields(m: dict[str, Any]) -> str:
    """The measured yields of an interruption rollout: `yield 50 ms`, or why there is none."""
    timing = m.get("timing")
    yields = timing.get("yields") if isinstance(timing, dict) else None
    out = []
    for y in yields if isinstance(yields, list) else []:
        if not isinstance(y, dict):
            continue
        ms = y.get("yield_ms")
        if isinstance(ms, int | float):
            out.append(f"yield {ms:.0f} ms after the barge-in at {y.get('barge_in_s', 0):.2f} s")
        else:
            out.append(f"no yield: {y.get('why_none') or 'not measured'}")
    return "; ".join(out)


def verdicts_table(rollouts: list[dict[str, Any]]) -> Table | None:
    """Per rollout with a verdict: pass/FAIL, the rule and what was measured. None when no
    rollout has a rule (e.g. kind `free`, or a proxy run)."""
    t = Table(title="what pass tested (per rollout)", title_justify="left")
    for col in ("rollout", "pass", "rule (measured)"):
        t.add_column(col)
    rows = 0
    for m in rollouts:
        timing = m.get("timing")
        rule = timing.get("rule") if isinstance(timing, dict) else None
        verdict = _verdict(m)
        if not rule and verdict is None:
            continue
        rows += 1
        text = str(rule or "-")
        measured = _yields(m)
        if measured:
            text += f"; {measured}"
        cell = Text("-") if verdict is None else Text("pass" if verdict else "FAIL")
        if verdict is False:
            cell.stylize("bold red")
        t.add_row(Text(str(m.get("rollout_id"))), cell, Text(text))
    return t if rows else None
