"""The shapes every scorer reports in: a metric with its interval, and groups by tag.

A *metric* is a dict with `value`, `n` and an interval (`ci_low`, `ci_high`, `ci_method`):
rates carry the Wilson score interval over their units and, with `--cluster TAG`, also a
percentile bootstrap over that tag's values (`boot_ci_low`, `boot_ci_high`); medians and
percentiles carry a percentile bootstrap over clusters (items by default: repeats and the
marks of one item are not independent). rig.analysis.tables and `rig report --csv` read
this shape back from scores.json without knowing the scorer, so keep to it.

A *unit* is one scored thing (a mark's outcome, an item's verdict) as a dict carrying
`rollout`, `item`, `tags` and `cluster`; `grouped(units, by)` gives the `all` group and,
per `--by` tag (several nest), one group per value (`(none)` where the tag is missing).
Grouping and clusters are rig.analysis.groups' (the same rules as the aggregate tables of
`rig report --by/--cluster`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.analysis.groups import group_by
from rig.analysis.stats import bootstrap_ci, percentile, wilson
from rig.analysis.tagkeys import cluster_of

Unit = dict[str, Any]


@dataclass(frozen=True, slots=True)
class CI:
    """How intervals are made: level, resamples, seed, and the cluster tag (None: items)."""

    confidence: float = 0.95
    n_resamples: int = 2000
    seed: int = 0
    cluster: str | None = None

    @property
    def over(self) -> str:
        return f"tag {self.cluster}" if self.cluster else "items"


def rate_metric(flags: Sequence[bool], clusters: Sequence[str], ci: CI) -> dict[str, Any]:
    """k/n with its Wilson interval (and a cluster bootstrap with `--cluster`)."""
    n, k = len(flags), sum(bool(f) for f in flags)
    w = wilson(k, n, ci.confidence)
    out: dict[str, Any] = {
        "value": k / n if n else None,
        "k": k,
        "n": n,
        "ci_low": w[0] if w else None,
        "ci_high": w[1] if w else None,
        "ci_method": "wilson",
    }
    if ci.cluster and n:
        b = bootstrap_ci(
            [float(f) for f in flags],
            stat=_mean,
            confidence=ci.confidence,
            n_resamples=ci.n_resamples,
            seed=ci.seed,
            clusters=list(clusters),
        )
        out["boot_ci_low"], out["boot_ci_high"] = (b[0], b[1]) if b else (None, None)
        out["boot_method"] = f"percentile bootstrap over {ci.over}"
    return out


def _mean(a: npt.NDArray[np.float64]) -> float:
    return float(np.mean(a))


def _median(a: npt.NDArray[np.float64]) -> float:
    return float(np.median(a))


def stat_metric(
    values: Sequence[float],
    clusters: Sequence[str],
    ci: CI,
    *,
    stat: str = "median",
) -> dict[str, Any]:
    """A median (with p25, p75, IQR) or a mean, with a bootstrap interval over clusters."""
    a = np.asarray(values, dtype=np.float64)
    out: dict[str, Any] = {"value": None, "n": int(a.size), "ci_low": None, "ci_high": None}
    out["ci_method"] = f"percentile bootstrap over {ci.over}"
    if not a.size:
        return out
    fn: Callable[[npt.NDArray[np.float64]], float] = _median if stat == "median" else _mean
    b = bootstrap_ci(
        a,
        stat=fn,
        confidence=ci.confidence,
        n_resamples=ci.n_resamples,
        seed=ci.seed,
        clusters=list(clusters),
    )
    out["value"] = fn(a)
    out["ci_low"], out["ci_high"] = (b[0], b[1]) if b else (None, None)
    if stat == "median":
        q25, q75 = (float(x) for x in np.percentile(a, [25.0, 75.0]))
        out |= {"p25": q25, "p75": q75, "iqr": q75 - q25}
    return out


def percentile_metric(
    values: Sequence[float], clusters: Sequence[str], q: float, ci: CI
) -> dict[str, Any]:
    """The q-th percentile with its percentile-bootstrap interval over clusters."""

    def stat(a: npt.NDArray[np.float64]) -> float:
        return float(np.percentile(a, q))

    b = (
        bootstrap_ci(
            values,
            stat=stat,
            confidence=ci.confidence,
            n_resamples=ci.n_resamples,
            seed=ci.seed,
            clusters=list(clusters),
        )
        if len(values)
        else None
    )
    return {
        "value": percentile(values, q),
        "n": len(values),
        "ci_low": b[0] if b else None,
        "ci_high": b[1] if b else None,
        "ci_method": f"percentile bootstrap over {ci.over}",
    }


def grouped(units: Sequence[Unit], by: Sequence[str]) -> list[tuple[dict[str, str], list[Unit]]]:
    """[(group tags, units)]: every unit as `all` ({}), then one group per tag value."""
    out: list[tuple[dict[str, str], list[Unit]]] = [({}, list(units))]
    return out + (group_by(units, by, _unit_tags) if by else [])


def _unit_tags(u: Unit) -> dict[str, Any]:
    return {"tags": u["tags"]}


def group_label(group: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in group.items()) or "all"


def unit(r: Any, ci: CI, **fields: Any) -> Unit:
    """A unit record for rollout `r` (rig.scoring.rundir.Rollout)."""
    return {
        "rollout": r.rollout_id,
        "item": r.item,
        "tags": dict(r.tags),
        "cluster": cluster_of(r.tags, ci.cluster, item=r.item, rollout=r.rollout_id),
        **fields,
    }


def clusters(units: Sequence[Unit]) -> list[str]:
    return [str(u["cluster"]) for u in units]


def r4(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)
