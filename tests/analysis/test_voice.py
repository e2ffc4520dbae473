"""Reply voice measures on signals whose harmonicity is known: a harmonic buzz with noise
mixed at a set harmonics-to-noise ratio, and noise alone (a whisper's excitation)."""

from __future__ import annotations

import numpy as np
import pytest

from rig.analysis import voice
from rig.analysis.voicereport import voice_summary, with_reference

RATE = 16_000


def buzz(seconds: float, f0: float = 140.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    x = sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, int(4000 // f0) + 1))
    return x / np.sqrt(np.mean(x**2))


def with_hnr(hnr_db: float, seconds: float = 1.5, level_dbfs: float = -20.0) -> np.ndarray:
    h = buzz(seconds)
    n = np.random.default_rng(1).standard_normal(h.size)
    n *= np.sqrt(np.mean(h**2) / np.mean(n**2) / 10 ** (hnr_db / 10))
    x = h + n
    return x / np.sqrt(np.mean(x**2)) * 10 ** (level_dbfs / 20)


def whisper(seconds: float = 1.5, level_dbfs: float = -30.0) -> np.ndarray:
    x = np.random.default_rng(2).standard_normal(round(seconds * RATE))
    return x / np.sqrt(np.mean(x**2)) * 10 ** (level_dbfs / 20)


@pytest.mark.parametrize("hnr_db", [20.0, 10.0, 3.0])
def test_praat_hnr_recovers_the_mixed_ratio(hnr_db: float) -> None:
    pytest.importorskip("parselmouth")
    hnr, voiced = voice.praat_measures(with_hnr(hnr_db), RATE)
    assert hnr == pytest.approx(hnr_db, abs=1.0)
    assert voiced is not None and voiced > 0.9  # the pitch is there even at 3 dB


def timing_of(track: np.ndarray, segments: list[tuple[float, float]]) -> dict:
    """A timing block with one user turn before each segment and its response at its onset."""
    return {
        "activity": {"system": [list(s) for s in segments]},
        "responses": [{"turn": i, "onset_s": s} for i, (s, _) in enumerate(segments)],
        "turns": [{"speech_start_s": s - 2.0} for s, _ in segments],
    }


def test_voiced_and_whispered_replies_get_their_verdicts_and_levels() -> None:
    pytest.importorskip("parselmouth")
    gap = np.zeros(RATE)
    track = np.concatenate([gap, with_hnr(15.0), gap, whisper(), gap, with_hnr(4.0)])
    segs = [(1.0, 2.5), (3.5, 5.0), (6.0, 7.5)]
    out = voice.measure_replies(track, RATE, timing_of(track, segs), whisper_hnr_max_db=6.0,
                                whisper_voiced_max=0.4)  # fmt: skip
    assert out["status"] == "measured"
    normal, whispered, breathy = out["replies"]
    assert normal["whisper"] is False and normal["hnr_db"] > 12
    assert whispered["whisper"] is True
    assert whispered["hnr_db"] < 6 and whispered["voiced_fraction"] < 0.4
    # low HNR alone is not a whisper: the voicing is still there
    assert breathy["hnr_db"] < 6 and breathy["whisper"] is False
    assert normal["rms_dbfs"] == pytest.approx(-20.0, abs=0.1)
    assert whispered["rms_dbfs"] == pytest.approx(-30.0, abs=0.1)
    assert out["whispered"] == 1 and out["judged"] == 3
    # the thresholds are rules: a stricter one turns the verdict
    strict = voice.measure_replies(track, RATE, timing_of(track, segs),
                                   whisper_hnr_max_db=-10.0, whisper_voiced_max=0.4)  # fmt: skip
    assert strict["replies"][1]["whisper"] is False


def test_words_per_second_from_asr_words() -> None:
    track = np.concatenate([np.zeros(RATE), with_hnr(15.0, 2.0)])
    words = [{"track": "system", "word": w, "start": 1.1 + 0.4 * i, "end": 1.4 + 0.4 * i}
             for i, w in enumerate("one two three four".split())]  # fmt: skip
    out = voice.measure_replies(
        track, RATE, timing_of(track, [(1.0, 3.0)]), whisper_hnr_max_db=6,
        whisper_voiced_max=0.4, words=words,
    )  # fmt: skip
    assert out["replies"][0]["words"] == 4 and out["replies"][0]["words_per_s"] == 2.0


def test_without_parselmouth_levels_are_kept_and_voice_is_not_measured(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "parselmouth" else real(n, *a)
    )
    track = np.concatenate([np.zeros(RATE), whisper()])
    out = voice.measure_replies(track, RATE, timing_of(track, [(1.0, 2.5)]),
                                whisper_hnr_max_db=6, whisper_voiced_max=0.4)  # fmt: skip
    assert out["status"] == "not measured (install rig-voice[conditions])"
    rep = out["replies"][0]
    assert rep["rms_dbfs"] == pytest.approx(-30.0, abs=0.1) and rep["whisper"] is None


class R:
    def __init__(self, rid: str, m: dict) -> None:
        self.rollout_id, self.metrics = rid, m


def rollout(rid: str, levels: list[float], conds: dict[int, dict]) -> R:
    replies = [{"turn": i, "rms_dbfs": x, "whisper": x < -25} for i, x in enumerate(levels)]
    turns = [{"turn": i, "label": f"t{i}", "condition": c} for i, c in conds.items()]
    return R(rid, {
        "scenario": "s", "item": rid, "conditions": {"turns": turns},
        "timing": {"params": {"lowered_ratio": 0.7}, "voice": {"replies": replies}},
    })  # fmt: skip


def test_relative_level_is_against_the_replies_to_unconditioned_turns() -> None:
    rows = [
        rollout("a", [-13.0, -26.0], {1: {"target_rms_dbfs": -35}}),
        rollout("b", [-12.0, -14.0], {}),
    ]
    summary = voice_summary(rows)
    assert summary["reference_from"] == "replies to turns without a condition"
    assert summary["reference_dbfs"] == -13.0  # median of -13, -12, -14
    rel = {(r["rollout_id"], r["turn"]): r["rel_db"] for r in summary["replies"]}
    assert rel[("a", 1)] == -13.0
    lowered = summary["lowered"]
    assert (lowered["passed"], lowered["evaluated"]) == (1, 1)
    assert summary["whisper"]["passed"] == 1
    assert summary["conditioned_rel_db_median"] == -13.0
    # no conditions at all: every reply is the reference
    rows2, ref, source = with_reference([
        {"rms_dbfs": -10.0, "condition": "", "lowered_ratio": 0.7},
        {"rms_dbfs": -20.0, "condition": "", "lowered_ratio": 0.7},
    ])  # fmt: skip
    assert source == "all replies" and ref == -15.0 and rows2[1]["lowered"] is True
