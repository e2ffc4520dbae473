"""scores.json (rig.scoring, `rig report --score`) as one tidy row per group and metric.

Read by `rig.load_run` (the `scores` table) and `rig report --csv` (scores.csv) without
importing the scorers: it knows only the shape every scorer writes (rig.scoring.measures):
`scorers.<name>.groups[].metrics.<metric>` = {value, n, ci_low, ci_high, ci_method, ...},
plus pause_turn's duration bins and shift variants and the `--compare` block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rig.analysis.rollout import read_json

SCORE_COLUMNS: tuple[str, ...] = (
    "scorer", "group", "variant", "metric", "value", "n", "k", "ci_low", "ci_high",
    "ci_method", "boot_ci_low", "boot_ci_high", "boot_method", "p25", "p75", "iqr",
    "within_budget", "params",
)  # fmt: skip
_KEYS = SCORE_COLUMNS[4:-1]


def _label(group: Any) -> str:
    if not isinstance(group, dict) or not group:
        return "all"
    return ", ".join(f"{k}={v}" for k, v in group.items())


def _row(scorer: str, group: Any, variant: str, metric: str, m: dict[str, Any], params: str) -> Any:
    row: dict[str, Any] = {"scorer": scorer, "group": _label(group), "variant": variant}
    row["metric"] = metric
    row.update({k: m.get(k) for k in _KEYS})
    if isinstance(group, dict):
        row.update({f"tag.{k}": v for k, v in group.items()})
    row["params"] = params
    return row


def score_rows(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Tidy rows of a scores.json document (empty for None)."""
    rows: list[dict[str, Any]] = []
    scorers = (doc or {}).get("scorers")
    for name, entry in (scorers if isinstance(scorers, dict) else {}).items():
        if not isinstance(entry, dict):
            continue
        params = json.dumps(entry.get("params", {}), sort_keys=True, separators=(",", ":"))
        for g in entry.get("groups") or []:
            for metric, m in (g.get("metrics") or {}).items():
                if isinstance(m, dict):
                    rows.append(_row(name, g.get("group"), "", metric, m, params))
            for b in g.get("takeover_by_duration") or []:
                hi = b.get("dur_hi_s")
                span = f"[{b.get('dur_lo_s')}, {'inf' if hi is None else hi}) s"
                rows.append(_row(name, g.get("group"), f"duration {span}", "takeover_rate", b,
                                 params))  # fmt: skip
        shift = entry.get("shift")
        for v in (shift or {}).get("variants") or [] if isinstance(shift, dict) else []:
            for metric, m in v.items():
                if isinstance(m, dict) and "value" in m:
                    row = _row(name, v.get("group"), f"shift {v.get('variant')}", metric, m, params)
                    row["change"] = m.get("change")
                    rows.append(row)
    comp = (doc or {}).get("compare")
    if isinstance(comp, dict):
        for g in comp.get("groups") or []:
            for metric, m in (g.get("metrics") or {}).items():
                row = _row("compare", g.get("group"), f"vs {comp.get('run_b')}", metric, m, "")
                rows.append(row)
    return rows


def load_score_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    return score_rows(read_json(Path(run_dir) / "scores.json"))
