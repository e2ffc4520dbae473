"""Grouping rollouts by item tags and the bootstrap over a tag's values (conversations)."""

from pathlib import Path

import numpy as np

from rig.analysis.aggregate import RolloutMetrics, RunData, aggregate
from rig.analysis.groups import cluster_labels, group_by, grouped_reports, tag_bootstrap


def _r(rid: str, latency: float, **tags: str) -> RolloutMetrics:
    m = {
        "scenario": "s",
        "item": rid,
        "tags": tags,
        "timing_valid": True,
        "responses": [{"latency_ms": latency}],
    }
    return RolloutMetrics(rid, "ok", m)


def test_group_by_nests_in_the_order_given_and_names_missing_tags() -> None:
    rows = [
        _r("a", 1, type="pause", conversation="c2"),
        _r("b", 2, type="pause", conversation="c1"),
        _r("c", 3, type="turn", conversation="c1"),
        _r("d", 4),
    ]
    groups = group_by(rows, ["type", "conversation"])
    assert [(g, [r.rollout_id for r in rs]) for g, rs in groups] == [
        ({"type": "(none)", "conversation": "(none)"}, ["d"]),
        ({"type": "pause", "conversation": "c1"}, ["b"]),
        ({"type": "pause", "conversation": "c2"}, ["a"]),
        ({"type": "turn", "conversation": "c1"}, ["c"]),
    ]
    assert cluster_labels(rows, "conversation") == ["c2", "c1", "c1", "(none)#3"]


def test_the_tag_bootstrap_resamples_conversations_not_items() -> None:
    # three conversations of ten points each: points of a conversation move together
    values = [float(c * 100 + i % 2) for c in range(3) for i in range(10)]
    convs = [f"c{c}" for c in range(3) for _ in range(10)]
    by_conv = tag_bootstrap(values, convs, seed=1)
    by_item = tag_bootstrap(values, list(range(30)), seed=1)
    assert by_conv is not None and by_item is not None
    # with only three clusters the median can be any conversation's level
    assert by_conv[0] <= 1.0 and by_conv[1] >= 200.0
    assert by_item[1] - by_item[0] < by_conv[1] - by_conv[0]


def test_aggregate_clusters_by_a_tag_and_groups_every_table() -> None:
    rng = np.random.default_rng(0)
    rows = [
        _r(f"{c}-{i}", 100.0 * k + float(rng.normal(0, 20)), conversation=c)
        for k, c in enumerate(("c1", "c2", "c3"))
        for i in range(6)
    ]
    data = RunData(Path("."), None, rows)
    fast = {"n_resamples": 300}  # the interval's width is all these look at
    items = aggregate(data, **fast)
    convs = aggregate(data, cluster="conversation", **fast)
    assert items["cluster"] == "item" and convs["cluster"] == "conversation"
    groups = grouped_reports(data, ["conversation"], cluster="conversation", **fast)
    assert [g["tags"]["conversation"] for g in groups] == ["c1", "c2", "c3"]
    assert all(g["n_rollouts"] == 6 and g["overall"]["latency_ms"]["n"] == 6 for g in groups)
    assert groups[2]["overall"]["latency_ms"]["median"] > 150
    # inside one conversation there is one cluster: resampling it would give back the same
    # data (a zero-width CI that says nothing), so its rollouts' spread is the CI, as per item
    one = groups[0]["overall"]["latency_ms"]
    per_item = grouped_reports(data, ["conversation"], **fast)[0]["overall"]["latency_ms"]
    assert per_item["ci_high"] - per_item["ci_low"] > 5  # six items resampled
    assert (one["ci_low"], one["ci_high"]) == (per_item["ci_low"], per_item["ci_high"])
