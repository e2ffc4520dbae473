"""The one cluster rule: the aggregate tables and the scorers resample the same clusters."""

from __future__ import annotations

from rig.analysis.tagkeys import cluster_of, tag_value, tags_of
from rig.scoring.measures import CI, unit
from rig.scoring.rundir import Rollout


def test_cluster_is_the_item_else_the_tag_value_else_the_rollout_alone() -> None:
    tags = {"conversation": "c1"}
    assert cluster_of(tags, None, item="c1-turn", rollout="c1-turn#2") == "c1-turn"
    assert cluster_of(tags, "conversation", item="c1-turn", rollout="r") == "c1"
    assert cluster_of({}, "conversation", item="c1-turn", rollout="r7") == "(none)#r7"
    assert tags_of({"tags": {"n": 3}}) == {"n": "3"} and tag_value({}, "type") == "(none)"


def test_scorer_units_carry_the_same_clusters() -> None:
    r = Rollout(rollout_id="r1", item="c1-turn", scenario="s", status="ok", kind=None,
                tags={"conversation": "c1"}, marks=(), reference=None, censored=False,
                timing_valid=True, basis="vad", speech=())  # fmt: skip
    assert unit(r, CI(cluster="conversation"))["cluster"] == "c1"
    assert unit(r, CI())["cluster"] == "c1-turn"
    assert unit(r, CI(cluster="speaker"))["cluster"] == "(none)#r1"
