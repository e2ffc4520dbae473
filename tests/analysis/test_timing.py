"""Two-track timing metrics and pass rules, on segments and on synthetic recordings with known
answers (tones, noise bursts and espeak-ng speech placed at chosen times)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.analysis.timing import (
    Injection,
    TimingParams,
    analyze,
    analyze_segments,
    normalize_kind,
    structure_from_events,
)
from rig.analysis.yields import Stream, stream_of
from rig.errors import ConfigError

RATE = 16000


# -- segment level: exact answers ------------------------------------------------------------


def test_response_latency_positive_early_and_missing() -> None:
    m = analyze_segments([(1.0, 3.0)], [(3.7, 6.0)], turns=[(0.9, 3.2)], t0_ns=10**12)
    (r,) = m["responses"]
    assert r["latency_ms"] == pytest.approx(700.0)
    assert r["user_end_ns"] == 10**12 + 3 * 10**9
    assert r["onset_ns"] == 10**12 + 3_700_000_000
    assert m["latency_ms"] == [pytest.approx(700.0)]
    early = analyze_segments([(1.0, 3.0)], [(2.8, 6.0)], turns=[(0.9, 3.2)])
    assert early["responses"][0]["latency_ms"] == pytest.approx(-200.0)
    # a system segment that began well before the user's end is not the response
    mid = analyze_segments([(1.0, 3.0)], [(2.0, 2.3)], turns=[(0.9, 3.2)])
    assert mid["responses"][0]["latency_ms"] is None
    late = analyze_segments(
        [(1.0, 3.0)], [(4.5, 5.0)], turns=[(0.9, 3.2)], params=TimingParams(response_window_s=1.0)
    )
    assert late["responses"][0]["onset_s"] is None and late["latency_ms"] == []


def test_silent_turn_falls_back_to_turn_end() -> None:
    m = analyze_segments([], [(3.5, 4.0)], turns=[(1.0, 3.0)])
    assert m["responses"][0]["user_end_from"] == "turn"
    assert m["responses"][0]["latency_ms"] == pytest.approx(500.0)


def test_takeover_in_pause_vs_short_backchannel_in_pause() -> None:
    user = [(1.0, 2.0), (3.5, 5.0)]
    turn = [(0.9, 5.1)]
    taken = analyze_segments(user, [(2.5, 4.5)], turns=turn, kind="pause")
    (pause,) = taken["pauses"]
    assert (pause["start_s"], pause["end_s"], pause["dur_ms"]) == (2.0, 3.5, 1500.0)
    assert pause["takeover"] and pause["takeover_after_ms"] == pytest.approx(500.0)
    assert taken["pass"] is False and taken["pause_takeovers"] == 1
    polite = analyze_segments(user, [(2.6, 2.9), (5.6, 7.0)], turns=turn, kind="pause")
    assert polite["pass"] is True and polite["pause_takeovers"] == 0
    assert [b["start_s"] for b in polite["backchannels"]] == [2.6]
    assert polite["responses"][0]["latency_ms"] == pytest.approx(600.0)
    no_pause = analyze_segments([(1.0, 5.0)], [], turns=turn, kind="pause")
    assert no_pause["pass"] is None


def test_pause_without_turns_uses_pause_max() -> None:
    user = [(1.0, 2.0), (3.0, 4.0), (9.0, 10.0)]
    m = analyze_segments(user, [(2.2, 2.8)], params=TimingParams(pause_max_s=2.0))
    assert [(p["start_s"], p["end_s"]) for p in m["pauses"]] == [(2.0, 3.0)]
    assert len(m["responses"]) == 2  # [1, 4] and [9, 10] are separate turns


def test_overlap_total_and_events() -> None:
    user = [(1.0, 3.0), (5.0, 6.0)]
    system = [(2.5, 4.0), (4.8, 5.3)]
    m = analyze_segments(user, system)
    ov = m["overlap"]
    assert ov["total_s"] == pytest.approx(0.8)
    assert ov["count"] == 2
    assert [(e["start_s"], e["end_s"], e["by"]) for e in ov["events"]] == [
        (2.5, 3.0, "system"),
        (5.0, 5.3, "user"),
    ]


def realtime(system: list[tuple[float, float]]) -> Stream:
    """A stream sent in real time: every sample arrives when it plays."""
    return Stream(segments=tuple(system), pos_s=(0.0,), arrival_s=(0.0,))


def test_yield_after_barge_in() -> None:
    user = [(1.0, 2.0), (4.0, 4.6)]
    inj = [Injection(3.95, "interruption")]

    def run(system: list[tuple[float, float]], **kw: object) -> dict[str, object]:
        return analyze_segments(
            user,
            system,
            injections=inj,
            kind="interruption",
            stream=realtime(system),
            stream_rate=RATE,
            **kw,  # type: ignore[arg-type]
        )

    quick = run([(2.6, 4.3)])
    (y,) = quick["yields"]
    assert y["barge_in_s"] == 4.0 and y["barge_in_from"] == "vad"
    assert y["yield_ms"] == pytest.approx(300.0) and y["yield_from"] == "stream"
    assert y["stream"]["yield_ms"] == pytest.approx(300.0)
    assert y["playback_untruncated"]["yield_ms"] == pytest.approx(300.0)
    assert quick["pass"] is True
    stubborn = run([(2.6, 6.0)])
    assert stubborn["yields"][0]["yield_ms"] == pytest.approx(2000.0)
    assert stubborn["pass"] is False
    quiet = run([(2.6, 3.5)])
    # nothing playing at the barge-in: nothing to yield, so the rule cannot tell
    assert quiet["yields"][0]["system_talking"] is False and quiet["pass"] is None
    assert "cannot tell" in quiet["rule"] and quiet["yields"][0]["pass"] is None
    strict = run([(2.6, 4.3)], params=TimingParams(yield_max_s=0.2))
    assert strict["pass"] is False
    assert analyze_segments(user, [], kind="interruption")["pass"] is None


def test_yield_is_never_the_rig_truncation() -> None:
    """The listener track stops at the barge-in (the rig truncated it), the system's stream
    goes on: the rule reads the stream; without a stream it cannot judge."""
    user = [(1.0, 2.0), (4.0, 4.6)]
    inj = [Injection(3.95, "interruption")]
    truncated = [(2.6, 4.02)]
    m = analyze_segments(
        user,
        truncated,
        injections=inj,
        kind="interruption",
        stream=realtime([(2.6, 8.6)]),
        stream_rate=RATE,
    )
    (y,) = m["yields"]
    assert y["playback_truncated"]["yield_ms"] == pytest.approx(20.0)
    assert y["yield_ms"] == pytest.approx(4600.0) and m["pass"] is False
    blind = analyze_segments(user, truncated, injections=inj, kind="interruption")
    assert blind["pass"] is None and "no received.wav" in blind["rule"]


def test_yield_sent_ahead_and_acknowledged() -> None:
    """A reply that arrived in full before the barge-in cannot show a yield in its stream
    (the rule cannot tell, saying why); the server's acknowledgement is the other measure."""
    user = [(1.0, 2.0), (4.0, 4.6)]
    inj = [Injection(3.95, "interruption")]
    # 6 s of reply in 40 ms chunks, all arrived within 2 ms
    n = 150
    burst = Stream(
        segments=((2.6, 8.6),),
        pos_s=tuple(2.6 + 0.04 * i for i in range(n)),
        arrival_s=tuple(2.6 + 1e-5 * i for i in range(n)),
    )
    m = analyze_segments(
        user,
        [(2.6, 4.0)],
        injections=inj,
        kind="interruption",
        stream=burst,
        stream_rate=RATE,
        acks_s=[4.12],
    )
    (y,) = m["yields"]
    assert y["stream"]["sent_ahead"] is True and y["yield_ms"] is None
    # cannot tell from the stream (not failed); the rule says the ack could judge it
    assert "sent ahead" in y["why_none"] and m["pass"] is None and y["pass"] is None
    assert "cannot tell by stream" in m["rule"] and "yield_from = 'ack'" in m["rule"]
    assert y["ack"]["yield_ms"] == pytest.approx(120.0)
    assert y["playback_untruncated"]["yield_ms"] == pytest.approx(4600.0)
    by_ack = analyze_segments(
        user,
        [(2.6, 4.0)],
        injections=inj,
        kind="interruption",
        stream=burst,
        stream_rate=RATE,
        acks_s=[1.0, 4.12],
        params=TimingParams(yield_from="ack"),
    )
    assert by_ack["yields"][0]["yield_ms"] == pytest.approx(120.0) and by_ack["pass"] is True
    never = analyze_segments(
        user,
        [(2.6, 4.0)],
        injections=inj,
        kind="interruption",
        stream=burst,
        stream_rate=RATE,
        acks_s=[],
        params=TimingParams(yield_from="ack"),
    )
    assert never["pass"] is False
    with pytest.raises(ConfigError):
        TimingParams(yield_from="playback")


def test_system_backchannels_during_monologue() -> None:
    user = [(0.5, 4.0), (4.5, 10.0)]
    turn = [(0.4, 10.1)]
    good = analyze_segments(
        user, [(3.0, 3.4), (6.0, 6.3), (10.8, 12)], turns=turn, kind="backchannel"
    )
    assert [(b["start_s"], b["dur_ms"]) for b in good["backchannels"]] == [
        (3.0, pytest.approx(400.0)),
        (6.0, pytest.approx(300.0)),
    ]
    assert good["pass"] is True and good["turn_takeovers"] == []
    took = analyze_segments(user, [(3.0, 3.4), (6.0, 8.0)], turns=turn, kind="backchannel")
    assert took["pass"] is False and len(took["turn_takeovers"]) == 1
    silent = analyze_segments(user, [(10.8, 12.0)], turns=turn, kind="backchannel")
    assert silent["pass"] is False and silent["backchannels"] == []


def test_system_keeps_talking_through_user_backchannels() -> None:
    user = [(1.0, 2.0), (5.0, 5.5)]
    inj = [Injection(5.0, "backchannel", 5.5)]
    kept = analyze_segments(
        user, [(2.5, 9.0)], turns=[(0.9, 2.1)], injections=inj, kind="user_backchannel"
    )
    assert kept["user_backchannels"][0]["kept_talking"] is True and kept["pass"] is True
    stopped = analyze_segments(
        user, [(2.5, 5.8)], turns=[(0.9, 2.1)], injections=inj, kind="user-backchannels"
    )
    assert stopped["user_backchannels"][0]["kept_talking"] is False
    assert stopped["pass"] is False
    # without turn spans the user's "mhm" is not a turn the system must answer
    derived = analyze_segments(user, [(2.5, 9.0)], injections=inj)
    assert len(derived["responses"]) == 1


def test_turn_taking_rule_threshold() -> None:
    user, turn = [(1.0, 3.0)], [(0.9, 3.1)]
    assert analyze_segments(user, [(3.7, 5.0)], turns=turn, kind="turn-taking")["pass"] is True
    slow = analyze_segments(user, [(5.5, 6.0)], turns=turn, kind="turn_taking")
    assert slow["pass"] is False
    lax = TimingParams(turn_taking_max_s=3.0)
    assert analyze_segments(user, [(5.5, 6.0)], turns=turn, kind="turn_taking", params=lax)["pass"]
    assert analyze_segments(user, [], turns=turn, kind="turn_taking")["pass"] is False


def test_kinds_and_injections_validate() -> None:
    assert normalize_kind("Turn-Taking") == "turn_taking"
    assert normalize_kind(None) is None
    with pytest.raises(ConfigError):
        normalize_kind("smalltalk")
    with pytest.raises(ConfigError):
        Injection(1.0, "cough")


def test_structure_from_events() -> None:
    t0 = 5 * 10**9
    events = [
        {"kind": "session.start", "t_ns": t0, "t0_ns": t0},
        {"kind": "turn.start", "t_ns": t0 + 500_000_000},
        {"kind": "turn.end", "t_ns": t0 + 2_500_000_000},
        {"kind": "inject", "t_ns": t0 + 4 * 10**9, "injection": "interruption"},
        {"kind": "inject", "t_ns": t0 + 6 * 10**9, "type": "backchannel", "duration_ms": 400},
        {"kind": "inject", "t_ns": t0 + 7 * 10**9, "injection": "weird"},
        {"kind": "turn.start", "t_ns": "garbage"},
    ]
    turns, injections = structure_from_events(events, t0)
    assert turns == [(0.5, 2.5)]
    assert injections == [
        Injection(4.0, "interruption", None),
        Injection(6.0, "backchannel", pytest.approx(6.4)),
    ]


# -- array level: synthetic recordings -------------------------------------------------------


def noise(dur_s: float, seed: int, amp: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (amp * rng.standard_normal(round(dur_s * RATE))).astype(np.float32)


def track(total_s: float, parts: list[tuple[float, np.ndarray]]) -> np.ndarray:
    x = np.zeros(round(total_s * RATE), dtype=np.float32)
    for at_s, clip in parts:
        i = round(at_s * RATE)
        x[i : i + clip.size] += clip[: x.size - i]
    return x


def espeak(tmp_path: Path, text: str) -> np.ndarray:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    out = tmp_path / f"{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-w", str(out), text], check=True, capture_output=True)
    import soxr

    x, r = sf.read(out, dtype="float32")
    return np.asarray(soxr.resample(x, r, RATE), dtype=np.float32)


def speech_bounds(clip: np.ndarray) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(clip) > 1e-2)
    return loud[0] / RATE, loud[-1] / RATE


@pytest.mark.parametrize("gap_s", [0.35, 0.8, 1.6])
def test_latency_on_real_speech(tmp_path: Path, gap_s: float) -> None:
    question = espeak(tmp_path, "What time does the museum open on Sundays?")
    answer = espeak(tmp_path, "It opens at ten in the morning.")
    q0, q1 = speech_bounds(question)
    a0, _ = speech_bounds(answer)
    user_end = 0.5 + q1
    sys_at = user_end + gap_s - a0
    total = sys_at + answer.size / RATE + 0.5
    user = track(total, [(0.5, question)])
    system = track(total, [(sys_at, answer)])
    m = analyze(user, system, RATE, kind="turn_taking", turns=[(0.5, 0.5 + question.size / RATE)])
    (r,) = m["responses"]
    assert r["latency_ms"] == pytest.approx(gap_s * 1000, abs=40)
    assert m["pass"] is (gap_s <= TimingParams().turn_taking_max_s)
    assert m["placement"] == "playback"
    json.dumps(m, allow_nan=False)  # JSON-able as promised


def test_interruption_yield_with_tone_and_speech(tmp_path: Path) -> None:
    barge = espeak(tmp_path, "Wait, stop, stop.")
    b0, _ = speech_bounds(barge)
    t = np.arange(round(6.0 * RATE)) / RATE
    reply = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    barge_at, yield_s = 3.0, 0.45
    reply = reply[: round((barge_at + b0 + yield_s - 1.0) * RATE)]  # reply from 1.0 s
    user = track(7.0, [(barge_at, barge)])
    system = track(7.0, [(1.0, reply)])
    # the system's stream: one chunk per 40 ms, each arriving as it plays (real time)
    rows = [
        {"seq": i, "n_samples": 640, "t_ns": 10**12 + i * 40_000_000}
        for i in range(system.size // 640)
    ]
    stream = stream_of(system, RATE, rows, 10**12, TimingParams().activity)
    m = analyze(
        user,
        system,
        RATE,
        kind="interruption",
        turns=[],
        injections=[Injection(barge_at, "interruption")],
        stream=stream,
        stream_rate=RATE,
    )
    (y,) = m["yields"]
    # the stream's end is exact to the sample (the tone stops abruptly)
    assert y["stream"]["stream_end_s"] == pytest.approx(1.0 + reply.size / RATE, abs=0.002)
    assert y["barge_in_from"] == "vad"
    assert y["barge_in_s"] == pytest.approx(barge_at + b0, abs=0.03)
    assert y["yield_ms"] == pytest.approx(yield_s * 1000, abs=40)
    assert m["pass"] is True
    assert m["overlap"]["total_s"] == pytest.approx(yield_s, abs=0.05)


def test_pause_takeover_with_noise_bursts() -> None:
    user = track(8.0, [(1.0, noise(1.0, 1)), (3.5, noise(1.5, 2))])
    eager = track(8.0, [(2.6, noise(2.0, 3))])
    m = analyze(user, eager, RATE, kind="pause", turns=[(1.0, 5.0)])
    (p,) = m["pauses"]
    assert p["dur_ms"] == pytest.approx(1500, abs=45)
    assert p["takeover"] and p["takeover_after_ms"] == pytest.approx(600, abs=45)
    assert m["pass"] is False
    patient = track(8.0, [(5.6, noise(2.0, 3))])
    ok = analyze(user, patient, RATE, kind="pause", turns=[(1.0, 5.0)])
    assert ok["pass"] is True
    assert ok["responses"][0]["latency_ms"] == pytest.approx(600, abs=45)


def test_user_backchannel_on_real_speech(tmp_path: Path) -> None:
    mhm = espeak(tmp_path, "mhm")
    m0, m1 = speech_bounds(mhm)
    reply = noise(5.0, 4, amp=0.08)
    user = track(8.0, [(3.0, mhm)])
    system = track(8.0, [(1.0, reply)])
    inj = [Injection(3.0 + m0, "backchannel", 3.0 + m1)]
    m = analyze(user, system, RATE, kind="user_backchannel", turns=[], injections=inj)
    assert m["pass"] is True
    cut = track(8.0, [(1.0, reply[: round(2.4 * RATE)])])  # stops 0.4 s into the "mhm"
    m2 = analyze(user, cut, RATE, kind="user_backchannel", turns=[], injections=inj)
    assert m2["pass"] is False
