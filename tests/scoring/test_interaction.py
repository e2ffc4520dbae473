"""interaction on hand-built items: InteractionBench's pass windows, one rule at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rig.scoring.registry import score_dir
from tests.support.scoringrun import mark, rollout

TURN = {"turns": [{"speech_start_s": 0.5, "user_end_s": 3.0}]}


def _units(run: Path, *opts: str) -> dict[str, dict[str, Any]]:
    doc = score_dir(run, ["interaction"], list(opts))
    return {u["rollout"]: u for u in doc["scorers"]["interaction"]["units"]}


def test_turn_taking_window_and_false_start(tmp_path: Path) -> None:
    te = [mark("turn_end", 3.0)]
    t = {"type": "turn_taking"}
    rollout(tmp_path, "ok", system=[(3.2, 4.0)], marks=te, tags=t, timing=TURN)  # +200 ms
    rollout(tmp_path, "edge", system=[(2.96, 4.0)], marks=te, tags=t, timing=TURN)  # -40 ms
    # -100 ms is a false start, even with a later onset inside the window
    rollout(tmp_path, "early", system=[(2.9, 3.0), (3.5, 4.0)], marks=te, tags=t, timing=TURN)
    rollout(tmp_path, "late", system=[(5.6, 6.0)], marks=te, tags=t, timing=TURN)  # +2.6 s
    u = _units(tmp_path)
    assert u["ok"]["pass"] is True and u["ok"]["latency_ms"] == 200.0
    assert u["edge"]["pass"] is True
    assert u["early"]["pass"] is False and u["early"]["why"] == "false start"
    assert u["late"]["pass"] is False and u["late"]["why"] == "late"
    doc = score_dir(tmp_path, ["interaction"])
    m = doc["scorers"]["interaction"]["groups"][0]["metrics"]
    assert (m["turn_taking_pass_rate"]["k"], m["turn_taking_pass_rate"]["n"]) == (2, 4)
    # latency of the replies that do not start early: 200, -40, 2600 -> median 200
    assert m["turn_taking_latency_ms"]["value"] == 200.0


def test_pause_rule_any_vocalisation_fails(tmp_path: Path) -> None:
    p = [mark("pause", 2.0, 3.5)]
    t = {"type": "pause"}
    rollout(tmp_path, "held", system=[(4.0, 5.0)], marks=p, tags=t)
    rollout(tmp_path, "mhm", system=[(2.5, 2.8), (4.0, 5.0)], marks=p, tags=t)
    rollout(tmp_path, "mute", system=[], marks=p, tags=t)
    u = _units(tmp_path)
    assert u["held"]["pass"] is True
    assert u["mhm"]["pass"] is False and u["mhm"]["why"] == "took the floor in the pause"
    assert u["mute"]["pass"] is False and u["mute"]["why"] == "never spoke after"


def test_backchannel_anchor_and_interruption(tmp_path: Path) -> None:
    mono = {"turns": [{"speech_start_s": 0.5, "user_end_s": 10.0}]}
    rollout(tmp_path, "bc", system=[(3.0, 3.4), (6.0, 6.3)], kind="backchannel", timing=mono)
    rollout(tmp_path, "bclong", system=[(3.0, 3.4), (7.0, 11.0)], kind="backchannel",
            timing=mono)  # fmt: skip
    rollout(tmp_path, "bcnone", system=[], kind="backchannel", timing=mono)
    # the anchor word ends at 2.3 s: the window is [2.35, 2.6] s
    a = [mark("anchor", 2.0, 2.3, "comma")]
    rollout(tmp_path, "gram", system=[(2.5, 3.0)], marks=a, tags={"type": "anchor"})
    rollout(tmp_path, "gramlate", system=[(2.7, 3.0)], marks=a, tags={"type": "anchor"})
    rollout(tmp_path, "quiet", system=[(2.5, 3.0)], marks=a,
            tags={"type": "anchor", "expect": "silent"})  # fmt: skip
    y_ok = {"yields": [{"barge_in_s": 4.0, "system_talking": True, "yield_ms": 300.0}]}
    y_slow = {"yields": [{"barge_in_s": 4.0, "system_talking": True, "yield_ms": 1500.0}]}
    rollout(tmp_path, "int", system=[(2.0, 4.3)], kind="interruption", timing=y_ok)
    rollout(tmp_path, "intslow", system=[(2.0, 5.5)], kind="interruption", timing=y_slow)
    u = _units(tmp_path)
    assert (u["bc"]["pass"], u["bclong"]["pass"], u["bcnone"]["pass"]) == (True, False, False)
    assert (u["gram"]["pass"], u["gramlate"]["pass"], u["quiet"]["pass"]) == (True, False, False)
    assert u["int"]["pass"] is True and u["int"]["content"] == "not judged"
    assert u["intslow"]["pass"] is False


def test_type_from_the_tag_else_the_kind_and_eot_as_the_turn_end(tmp_path: Path) -> None:
    # a corpus's `type = turn_end` (People Making Conversation's) is no interaction type:
    # the item's kind decides; its `eot` mark is the last user word
    rollout(tmp_path, "t", system=[(3.3, 4.0)], marks=[mark("eot", 3.0)], kind="turn_taking",
            tags={"type": "turn_end"}, timing=TURN)  # fmt: skip
    rollout(tmp_path, "x", system=[(3.3, 4.0)], kind="free", tags={"type": "turn_end"})
    doc = score_dir(tmp_path, ["interaction"])["scorers"]["interaction"]
    u = {x["rollout"]: x for x in doc["units"]}
    assert u["t"]["mark"] == "turn_taking" and u["t"]["latency_ms"] == 300.0
    assert "x" not in u and doc["untyped_rollouts"] == 1
