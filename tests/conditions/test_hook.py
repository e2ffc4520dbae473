"""The uplink frame hook: conditioned turns and the noise between them, frame by frame, on
the session timeline (plain calls: an Uplink, its director and the hook)."""

from __future__ import annotations

import numpy as np
import pytest

from rig.conditions import apply_conditions
from rig.conditions.spec import parse_cli
from rig.core.director import Observation
from rig.core.pacer import Pacer, PacerConfig
from rig.core.uplink import Uplink
from rig.errors import ScenarioError
from rig.scenarios import data_path
from rig.scenarios.fileformat import build_items

RATE = 16_000
N = 320
T0 = 10**9


def doc(*steps: dict, condition: dict | None = None) -> dict:
    item: dict = {"id": "a", "steps": list(steps)}
    if condition:
        item["condition"] = condition
    return {"items": [item, {"id": "b", "steps": [{"type": "turn", "file": "pause_b.wav"}]}]}


def items_of(d: dict, run: list[str] | None = None, seed: int = 0) -> list:
    items = build_items(d, data_path("timing", "timing.toml"), RATE)
    apply_conditions(items, parse_cli(run), seed)
    return items


def stream(item, busy_until_ns: int = 0) -> tuple[np.ndarray, np.ndarray, Uplink]:
    """Every frame (sent, clean) of an item; the system 'talks' until busy_until_ns."""
    up = Uplink(item.plan.steps, Pacer(PacerConfig(RATE, N), T0))
    up.hooks.append(item.plan.conditions.frame_hook(up.director.turns))
    sent, clean = [], []
    while True:
        t = up.pacer.next_deadline_ns
        busy = t < busy_until_ns
        obs = Observation(t, busy, None if busy else min(t, busy_until_ns) or None, None, 0)
        frame = up.next_frame(obs)
        if frame is None:
            break
        up.sent(frame, frame.deadline_ns)
        sent.append(frame.pcm)
        clean.append(frame.clean)
    return np.concatenate(sent), np.concatenate(clean), up


TURN = {"type": "turn", "file": "question.wav", "pad_before_s": 0.3}
WHITE = {"kind": "white"}


def test_a_turn_plays_its_rendering_and_the_noise_goes_on_through_the_drain() -> None:
    item = items_of(doc(TURN, {"type": "drain", "quiet_s": 1.0, "max_s": 2.0}),
                    ["noise.kind=white,noise.snr_db=10"])[0]  # fmt: skip
    sent, clean, up = stream(item)
    turn = up.director.turns[0]
    rendered = item.plan.conditions.plays[0].pcm
    assert np.array_equal(sent[turn.start_sample : turn.end_sample], rendered)
    # the clean track is the director's: the file itself, silence around it
    assert np.array_equal(clean[turn.start_sample : turn.end_sample], item.plan.steps[1].pcm)
    assert not clean[: turn.start_sample].any() and not clean[turn.end_sample :].any()
    # the room: noise before the turn and through the whole drain, at the turn's noise level
    rec = item.meta["conditions"]["turns"][0]
    gain = 10 ** (rec["noise"]["noise_gain_db"] / 20)
    for part in (sent[: turn.start_sample - 10], sent[turn.end_sample :]):
        rms = np.sqrt(np.mean((part.astype(np.float64) / 32768) ** 2))
        assert rms == pytest.approx(gain, rel=0.05)
    # one continuous noise across the turn's edges (no waits: positions are nominal): the
    # bed before it is the loop up to the turn's noise position, after it the loop onwards
    pc = item.plan.conditions.plays[0]
    n = len(rendered)
    after = pc.bed.render(pc.noise_pos + n, 800)
    assert np.array_equal(sent[turn.end_sample : turn.end_sample + 800], after)
    before = pc.bed.render(pc.noise_pos - 800, 800)
    assert np.array_equal(sent[turn.start_sample - 800 : turn.start_sample], before)


def test_same_seed_same_uplink_bytes_other_seed_other_noise() -> None:
    d = doc(TURN, {"type": "drain", "quiet_s": 0.5, "max_s": 1.0})
    run = ["noise.kind=white,noise.snr_db=5"]
    a = stream(items_of(d, run, seed=4)[0])[0]
    b = stream(items_of(d, run, seed=4)[0])[0]
    c = stream(items_of(d, run, seed=5)[0])[0]
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


def test_after_a_wait_the_next_turn_takes_over_the_noise_without_touching_its_speech() -> None:
    steps = (
        {"type": "turn", "file": "question.wav", "condition": {"noise": WHITE | {"snr_db": 10}}},
        {"type": "release", "quiet_s": 0.2, "timeout_s": 1.3},
        {"type": "turn", "file": "pause_a.wav", "condition": {"noise": WHITE | {"snr_db": 0}}},
        {"type": "drain", "quiet_s": 0.2, "max_s": 0.5},
    )  # fmt: skip
    item = items_of(doc(*steps))[0]
    sent, _, up = stream(item)
    second = up.director.turns[1]
    pc = item.plan.conditions.plays[1]
    start = second.start_sample
    # the wait moved the second turn off its nominal start: a crossfade, then its rendering
    assert pc.fade > 0
    assert np.array_equal(sent[start + pc.fade : second.end_sample], pc.pcm[pc.fade :])
    a, b = (x / 16000 for x in (second.start_sample, second.end_sample))
    assert a > 2.0 and b - a == pytest.approx(len(pc.pcm) / RATE)


def test_a_prefill_is_history_and_is_never_conditioned() -> None:
    d = doc(TURN)
    d["items"][0]["prefill"] = "okay.wav"
    item = items_of(d, ["gain_db=-10"])[0]
    sent, clean, up = stream(item)
    pre = up.director.turns[0]
    assert pre.role == "prefill"
    assert np.array_equal(sent[: pre.end_sample], clean[: pre.end_sample])
    assert [t["role"] for t in item.meta["conditions"]["turns"]] == ["turn"]


def test_a_clipping_level_names_the_field_that_asked_for_it() -> None:
    d = doc({**TURN, "condition": {"target_rms_dbfs": -2}})
    with pytest.raises(ScenarioError, match=r"items\[0\].steps\[0\].condition.target_rms_dbfs"):
        items_of(d)
    with pytest.raises(ScenarioError, match=r"--condition: condition.gain_db: .*would clip"):
        items_of(doc(TURN), ["gain_db=30"])
