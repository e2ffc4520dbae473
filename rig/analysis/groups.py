"""Rollouts grouped by item tags, and the bootstrap that resamples a tag's values.

How this works: a scenario item's `tags` (conversation, speaker, intent, type, ...) are in
every rollout's metrics.json. `group_by` splits rows (anything `metrics_of` turns into a
metrics dict: RolloutMetrics by default) by the values of one or more tag names, nested in
the order given (`--by type --by conversation`: every type, and inside it every
conversation); a rollout without a tag falls in the group `(none)`. `cluster_labels` names
each value's cluster by a tag, and `tag_bootstrap` is the percentile bootstrap that
resamples those clusters (conversations, say) with replacement instead of single items:
the honest interval when points of one conversation share a speaker, a topic and a
recording. `grouped_reports` runs rig.analysis.aggregate on each group.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from rig.analysis.aggregate import RolloutMetrics, RunData, aggregate
from rig.analysis.render import render_table
from rig.analysis.stats import Stat, bootstrap_ci
from rig.analysis.tagkeys import NONE, tag_value, tags_of
from rig.errors import ConfigError
from rig.ids import ID

T = TypeVar("T")


def _metrics(row: Any) -> dict[str, Any]:
    if isinstance(row, RolloutMetrics):
        return row.metrics
    if isinstance(row, dict):
        return row
    raise TypeError(f"no metrics in {type(row).__name__}")


def check_tag_names(names: Iterable[str], flag: str) -> list[str]:
    out = []
    for n in names:
        if not ID.match(n):
            raise ConfigError(f"{flag} {n!r}: a tag name is 1-128 letters, digits, '_', '-', '.'")
        out.append(n)
    return out


def group_by(
    rows: Iterable[T], tags: Sequence[str], metrics_of: Callable[[T], dict[str, Any]] = _metrics
) -> list[tuple[dict[str, str], list[T]]]:
    """[(the group's tag values, its rows)], nested in the order of `tags`, values sorted."""
    groups: dict[tuple[str, ...], list[T]] = {}
    for r in rows:
        m = metrics_of(r)
        groups.setdefault(tuple(tag_value(m, t) for t in tags), []).append(r)
    return [(dict(zip(tags, key, strict=True)), groups[key]) for key in sorted(groups)]


def cluster_labels(
    rows: Sequence[T], tag: str, metrics_of: Callable[[T], dict[str, Any]] = _metrics
) -> list[str]:
    """Each row's cluster: its value of `tag` (a row without it is a cluster of its own)."""
    out = []
    for i, r in enumerate(rows):
        v = tags_of(metrics_of(r)).get(tag)
        out.append(v if v is not None else f"{NONE}#{i}")
    return out


def tag_bootstrap(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    *,
    stat: Stat | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int | np.random.Generator = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap CI of `stat` (median by default) resampling whole clusters."""
    kw: dict[str, Any] = {} if stat is None else {"stat": stat}
    return bootstrap_ci(
        values,
        clusters=clusters,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        **kw,
    )


def grouped_reports(data: RunData, by: Sequence[str], **kw: Any) -> list[dict[str, Any]]:
    """The aggregate report (rig.analysis.aggregate.aggregate, keywords `kw`) of every
    group of `data`'s rollouts by the tags `by`."""
    out = []
    for values, rows in group_by(data.rollouts, by):
        sub = RunData(data.run_dir, data.manifest, rows)
        report = aggregate(sub, **kw)
        out.append({"tags": values, "n_rollouts": len(rows), **_tables(report)})
    return out


def _tables(report: dict[str, Any]) -> dict[str, Any]:
    keep = ("status_counts", "overall", "scenarios", "items", "settings")
    return {k: report[k] for k in keep if k in report}


def add_groups(report: dict[str, Any], data: RunData, by: Sequence[str], **kw: Any) -> None:
    """`report["groups"]` for `rig report --by`: every group's tables (nothing without `by`)."""
    if by:
        report["by"] = list(by)
        report["groups"] = grouped_reports(data, by, **kw)


def render_groups(report: dict[str, Any]) -> list[Any]:
    """One rich table per group, titled with its tag values and cluster."""
    out = []
    for g in report.get("groups") or []:
        name = " ".join(f"{k}={v}" for k, v in g["tags"].items())
        title = f"{name} (CI over {report.get('cluster', 'item')}s)"
        out.append(render_table({**g, "run_id": title, "n_rollouts": g["n_rollouts"]}))
    return out
