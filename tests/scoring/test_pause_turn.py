"""pause_turn on hand-built run directories: outcomes, latencies, rates and their intervals
worked out by hand (People Making Conversation, section 3.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rig.errors import ConfigError
from rig.scoring.registry import score_dir
from tests.support.scoringrun import mark, rollout


def _group(entry: dict[str, Any], **group: str) -> dict[str, Any]:
    return next(g for g in entry["groups"] if g["group"] == group)["metrics"]


def _pauses(run: Path) -> None:
    p = [mark("pause", 2.0, 3.0)]
    tags = {"type": "pause"}
    rollout(run, "a", system=[(2.4, 2.9)], marks=p, tags=tags)  # takeover, 400 ms in
    rollout(run, "b", system=[(1.5, 2.5)], marks=p, tags=tags)  # under way at 2.0: 0 ms
    rollout(run, "c", system=[(3.5, 4.0)], marks=p, tags=tags)  # after: 1500 ms from start
    rollout(run, "d", system=[], marks=p, tags=tags)  # silent
    # with ASR words: a hum in the pause, words only later -> after (wordless_any)
    rollout(run, "e", system=[(2.2, 2.6), (5.0, 5.5)], marks=p, tags=tags,
            words=[("so", 5.1, 5.4)])  # fmt: skip
    # a hum in the pause and no word at all -> wordless
    rollout(run, "f", system=[(2.2, 2.6)], marks=p, tags=tags, words=[])


def test_pause_outcomes_and_rates(tmp_path: Path) -> None:
    _pauses(tmp_path)
    doc = score_dir(tmp_path, ["pause_turn"])
    entry = doc["scorers"]["pause_turn"]
    units = {u["rollout"]: u for u in entry["units"]}
    assert [units[k]["outcome"] for k in "abcdef"] == [
        "takeover", "takeover", "after", "silent", "after", "wordless",
    ]  # fmt: skip
    assert units["a"]["latency_ms"] == 400.0
    assert units["b"]["latency_ms"] == 0.0 and units["b"]["under_way"] is True
    assert units["c"]["latency_ms"] == 1500.0 and units["c"]["after_end_ms"] == 500.0
    assert units["e"]["latency_ms"] == 3100.0 and units["e"]["wordless_any"] is True
    m = _group(entry)
    # 2 takeovers of 6 pauses. Wilson 95 %: z = 1.95996, p = 1/3, n = 6:
    # centre (p + z^2/2n) / (1 + z^2/n) = (0.33333 + 0.32013) / 1.64025 = 0.39841,
    # half z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n) = 1.95996 * 0.25242 / 1.64025 = 0.30162
    t = m["pause_takeover_rate"]
    assert (t["k"], t["n"]) == (2, 6)
    assert t["ci_low"] == pytest.approx(0.0968, abs=2e-4)
    assert t["ci_high"] == pytest.approx(0.7000, abs=2e-4)
    assert m["pause_after_rate"]["k"] == 2
    assert m["pause_silent_rate"]["k"] == 1
    assert m["pause_wordless_rate"]["k"] == 1
    assert m["pause_wordless_any_rate"]["k"] == 2  # e and f
    # takeover latency: median of 400 and 0 = 200 ms; IQR 100..300
    lat = m["takeover_latency_ms"]
    assert lat["value"] == 200.0 and lat["p25"] == 100.0 and lat["p75"] == 300.0
    assert lat["ci_low"] == 0.0 and lat["ci_high"] == 400.0  # two items resampled
    # every pause is 1.0 s long: one bin, [1.0, 1.5) s, 2 of 6 taken
    (b,) = entry["groups"][0]["takeover_by_duration"]
    assert (b["dur_lo_s"], b["dur_hi_s"], b["k"], b["n"]) == (1.0, 1.5, 2, 6)
    # 2 of 6 rollouts have words: the rest fell back to VAD, and the result says so
    assert entry["basis"]["words"] == 2 and entry["basis"]["vad"] == 4
    assert "VAD activity stands in for words" in entry["basis"]["note"]


def test_turn_end_latency_length_and_ratios(tmp_path: Path) -> None:
    ref = {"text": "one two three four", "duration_s": 0.6, "words": 4}
    te = [mark("turn_end", 5.0)]
    # VAD only: speech from 4.8 to 6.0 -> latency -200 ms, duration 1.2 s, ratio 2.0
    rollout(tmp_path, "g", system=[(4.8, 6.0)], marks=te, reference=ref)
    # words at 5.3 and 5.7: latency 300 ms, duration 6.2 - 5.3 = 0.9 s (ratio 1.5),
    # 2 words of the reference's 4 (ratio 0.5); cut at the cap while talking
    rollout(tmp_path, "h", system=[(5.25, 6.2)], marks=te, reference=ref, censored=True,
            words=[("hi", 5.3, 5.6), ("there", 5.7, 6.1)])  # fmt: skip
    rollout(tmp_path, "i", system=[], marks=te, reference=ref)  # no words at all
    entry = score_dir(tmp_path, ["pause_turn"])["scorers"]["pause_turn"]
    u = {x["rollout"]: x for x in entry["units"]}
    assert u["g"]["latency_ms"] == -200.0 and u["g"]["duration_s"] == 1.2
    assert u["g"]["duration_ratio"] == 2.0 and u["g"]["word_ratio"] is None
    assert u["h"]["latency_ms"] == 300.0 and u["h"]["duration_s"] == 0.9
    assert u["h"]["duration_ratio"] == 1.5 and u["h"]["word_ratio"] == 0.5
    assert u["i"]["no_words"] is True and u["i"]["latency_ms"] is None
    m = _group(entry)
    assert m["turn_latency_ms"]["value"] == 50.0  # median of -200 and 300
    assert m["turn_no_words_rate"]["k"] == 1 and m["turn_no_words_rate"]["n"] == 3
    assert m["turn_censored_rate"]["k"] == 1 and m["turn_censored_rate"]["n"] == 3


def test_shift_moves_every_label_and_reports_the_change(tmp_path: Path) -> None:
    # speech at 3.1 s, after the labelled end 3.0: `after`; with the end 250 ms later
    # (3.25) it overlaps the pause: `takeover` (change +1.0); end 250 ms earlier: `after`
    rollout(tmp_path, "s", system=[(3.1, 3.5)], marks=[mark("pause", 2.0, 3.0)])
    entry = score_dir(tmp_path, ["pause_turn"], ["shift_ms=250"])["scorers"]["pause_turn"]
    assert entry["params"]["shift_ms"] == 250.0
    rows = {v["variant"]: v for v in entry["shift"]["variants"] if v["group"] == {}}
    assert rows["end+250ms"]["pause_takeover_rate"]["value"] == 1.0
    assert rows["end+250ms"]["pause_takeover_rate"]["change"] == 1.0
    assert rows["end-250ms"]["pause_takeover_rate"]["value"] == 0.0
    assert rows["start+250ms"]["pause_after_rate"]["change"] == 0.0
    # the whole label +250 ms: [2.25, 3.25) -> speech at 3.1 is inside
    assert rows["all+250ms"]["pause_takeover_rate"]["value"] == 1.0


def test_invalid_rollouts_left_out_unless_asked_and_counted(tmp_path: Path) -> None:
    p = [mark("pause", 2.0, 3.0)]
    rollout(tmp_path, "ok", system=[], marks=p)
    rollout(tmp_path, "bad", system=[(2.1, 2.5)], marks=p, timing_valid=False)
    rollout(tmp_path, "err", system=[], marks=p, status="error")
    entry = score_dir(tmp_path, ["pause_turn"])["scorers"]["pause_turn"]
    assert entry["excluded"]["timing_invalid"] == 1
    assert entry["excluded"]["timing_invalid_ids"] == ["bad"]
    assert entry["excluded"]["status"] == {"error": 1}
    assert _group(entry)["pause_takeover_rate"]["n"] == 1
    both = score_dir(tmp_path, ["pause_turn"], include_invalid=True)["scorers"]["pause_turn"]
    assert _group(both)["pause_takeover_rate"]["k"] == 1
    assert _group(both)["pause_takeover_rate"]["n"] == 2


def test_by_tag_groups_and_cluster_bootstrap(tmp_path: Path) -> None:
    p = [mark("pause", 2.0, 3.0)]
    for i, (conv, sys) in enumerate([("c1", [(2.1, 2.5)]), ("c1", []), ("c2", []), ("c2", [])]):
        rollout(tmp_path, f"r{i}", system=sys, marks=p,
                tags={"conversation": conv, "type": "pause"})  # fmt: skip
    entry = score_dir(tmp_path, ["pause_turn"], by=["conversation"], cluster="conversation")[
        "scorers"
    ]["pause_turn"]
    assert [g["group"] for g in entry["groups"]] == [
        {}, {"conversation": "c1"}, {"conversation": "c2"},
    ]  # fmt: skip
    assert _group(entry, conversation="c1")["pause_takeover_rate"]["value"] == 0.5
    t = _group(entry)["pause_takeover_rate"]
    # resampling 2 conversations: the rate is 0 (c2 twice), 0.25 or 0.5 (c1 twice)
    assert t["boot_ci_low"] == 0.0 and t["boot_ci_high"] == 0.5
    assert "tag conversation" in t["boot_method"]
    assert entry["intervals"]["cluster"] == "conversation"


def test_bad_options_fail_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no parameter 'nope'"):
        score_dir(tmp_path, ["pause_turn"], ["nope=1"])
    with pytest.raises(ConfigError, match="want a float"):
        score_dir(tmp_path, ["pause_turn"], ["shift_ms=abc"])
    with pytest.raises(ConfigError, match="unknown scorer"):
        score_dir(tmp_path, ["pause"])


def test_only_the_scored_region_counts(tmp_path: Path) -> None:
    # speech at 2.4 s would take the pause over, but the scored region starts at 2.5 s;
    # the word at 9.0 s lies past the region's end, so the turn end has no words
    marks = [mark("region", 2.5, 8.0), mark("pause", 2.0, 3.0), mark("turn_end", 5.0)]
    rollout(tmp_path, "r", system=[(2.4, 2.45), (9.0, 9.5)], words=[("hm", 9.0, 9.4)],
            marks=marks)  # fmt: skip
    entry = score_dir(tmp_path, ["pause_turn"])["scorers"]["pause_turn"]
    u = {x["mark"]: x for x in entry["units"]}
    assert u["pause"]["outcome"] == "silent"
    assert u["turn_end"]["no_words"] is True


def test_an_eot_is_a_turn_end_where_no_turn_end_stands(tmp_path: Path) -> None:
    # a corpus marks the turn end as `eot` (TurnBench's gold) or `turn_end`, or both at once:
    # each end is scored once
    rollout(tmp_path, "eot", system=[(5.3, 6.0)], marks=[mark("eot", 5.0)])
    rollout(tmp_path, "both", system=[(5.3, 6.0)],
            marks=[mark("turn_end", 5.0), mark("eot", 5.0)])  # fmt: skip
    entry = score_dir(tmp_path, ["pause_turn"])["scorers"]["pause_turn"]
    turns = [u for u in entry["units"] if u["mark"] == "turn_end"]
    assert sorted(u["rollout"] for u in turns) == ["both", "eot"]
    assert all(u["latency_ms"] == 300.0 for u in turns)
