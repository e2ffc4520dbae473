"""An item's tags in a rollout's metrics, and the cluster a bootstrap resamples it in.

The one rule for both the aggregate tables (rig.analysis.aggregate, `rig report
--cluster`) and the scorers (rig.scoring.measures); rig.analysis.groups builds the groups
and the tag bootstrap on it.
"""

from __future__ import annotations

from typing import Any

NONE = "(none)"


def tags_of(metrics: dict[str, Any]) -> dict[str, str]:
    t = metrics.get("tags")
    return {str(k): str(v) for k, v in t.items()} if isinstance(t, dict) else {}


def tag_value(metrics: dict[str, Any], tag: str) -> str:
    """The value of `tag` in a rollout's metrics, `(none)` where it has none."""
    return tags_of(metrics).get(tag, NONE)


def cluster_of(tags: dict[str, str], tag: str | None, *, item: str, rollout: str) -> str:
    """What a bootstrap resamples for one rollout: its item (no `tag`), else its value of
    `tag`; a rollout without that tag is a cluster of its own. The one rule of the aggregate
    tables (rig.analysis.aggregate) and the scorers (rig.scoring.measures)."""
    if tag is None:
        return item
    v = tags.get(tag)
    return str(v) if v is not None else f"{NONE}#{rollout}"
