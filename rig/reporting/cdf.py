"""Run-level picture: the empirical CDF of response latency per scenario, with error bands.

Why a CDF: a median hides the tail users feel; the whole distribution shows it, and the
band says how much of its shape n responses can support. The band is the
Dvoretzky-Kiefer-Wolfowitz one: with probability `confidence` the true CDF lies within
eps = sqrt(ln(2 / (1 - confidence)) / (2 n)) of the empirical one everywhere (no assumption
on the distribution; responses treated as independent, which repeats of one item are not).
The median and p95 are marked with their bootstrap intervals from the report
(rig.analysis.aggregate). matplotlib (the `plot` extra) is imported when a picture is drawn.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rig.extras import MissingExtra

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def dkw_eps(n: int, confidence: float = 0.95) -> float:
    """Half-width of the DKW band for n values."""
    return math.sqrt(math.log(2.0 / (1.0 - confidence)) / (2.0 * n)) if n else 1.0


def ecdf(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, fraction of values <= each) for a step plot."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    return x, np.arange(1, x.size + 1) / x.size


def latencies_by_scenario(run: Any, statuses: tuple[str, ...] = ("ok",)) -> dict[str, list[float]]:
    """Response latencies (ms) per scenario of a RunData, from rollouts with those statuses."""
    out: dict[str, list[float]] = {}
    for r in run.rollouts:
        if r.status not in statuses:
            continue
        name = str(r.metrics.get("scenario") or "default")
        for resp in r.metrics.get("responses") or []:
            lat = resp.get("latency_ms") if isinstance(resp, dict) else None
            if isinstance(lat, int | float) and math.isfinite(lat):
                out.setdefault(name, []).append(float(lat))
    return out


def render_cdf(
    groups: dict[str, list[float]],
    out: str | Path,
    *,
    report: dict[str, Any] | None = None,
    confidence: float = 0.95,
    title: str = "response latency",
    dpi: int = 110,
) -> Path:
    """Draw one ECDF (with its DKW band) per group into a PNG; `report` (aggregate's)
    adds each scenario's median and p95 with their bootstrap intervals."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtra("plot", "rig plot", "matplotlib") from exc
    summaries = {str(s["scenario"]): s["latency_ms"] for s in (report or {}).get("scenarios", [])}
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=dpi)
    for i, (name, values) in enumerate(sorted(groups.items())):
        if not values:
            continue
        color = COLORS[i % len(COLORS)]
        x, y = ecdf(values)
        eps = dkw_eps(x.size, confidence)
        ax.step(x, y, where="post", color=color, label=f"{name} (n={x.size})")
        ax.fill_between(
            x, np.clip(y - eps, 0, 1), np.clip(y + eps, 0, 1), step="post", color=color, alpha=0.15
        )
        s = summaries.get(name, {})
        for key, q, ci_key in (("median", 0.5, "ci"), ("p95", 0.95, "p95_ci")):
            v = s.get(key)
            ci = (s.get("ci_low"), s.get("ci_high")) if ci_key == "ci" else s.get(ci_key)
            if not isinstance(v, int | float):
                continue
            ax.plot([v], [q], marker="o", color=color)
            if ci and all(isinstance(c, int | float) for c in ci):
                ax.plot([ci[0], ci[1]], [q, q], color=color, linewidth=3, alpha=0.6)
    ax.set_xlabel("latency (ms): user end of turn to system onset, playback placement")
    ax.set_ylabel("fraction of responses <=")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(
        f"{title}: ECDF, {confidence:.0%} DKW band; dots median and p95 with bootstrap CI",
        fontsize=9,
    )
    fig.tight_layout()
    out_path = Path(out)
    fig.savefig(out_path, format="png")
    plt.close(fig)
    return out_path
