"""The reference system's reply voice and its noise-floor gate, sans-I/O (SimEngine)."""

from __future__ import annotations

import numpy as np

from rig.audio.source import tone
from rig.sim.engine import SimConfig, SimEngine, make_reply

RATE = 16_000


def db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean((x.astype(np.float64) / 32768) ** 2))


def feed(engine: SimEngine, x: np.ndarray) -> list[tuple[str, float, dict]]:
    out = []
    for k in range(0, x.size, 320):
        for t in engine.on_audio(x[k : k + 320], k * 62_500):
            out.append((t.event, k / RATE, t.data))
    return out


def test_reply_level_and_voice_knobs() -> None:
    base = make_reply(SimConfig())
    assert abs(db(base) + 12) < 0.05
    quiet = make_reply(SimConfig(reply_level_dbfs=-24.0))
    assert abs(db(quiet) + 24) < 0.05
    buzz = make_reply(SimConfig(reply_voice="buzz", reply_tone_hz=150))
    whisper = make_reply(SimConfig(reply_voice="whisper"))
    assert abs(db(buzz) + 12) < 0.05 and abs(db(whisper) + 12) < 0.05
    spec = np.abs(np.fft.rfft(buzz.astype(float)))
    f = np.fft.rfftfreq(buzz.size, 1 / RATE)
    assert spec[np.argmin(abs(f - 300))] > 10 * spec[np.argmin(abs(f - 225))]  # harmonics
    audio = np.full(1600, 1000, np.int16)
    assert np.all(make_reply(SimConfig(reply_level_dbfs=-18.0), audio) == 501)  # -6 dB


def speech_like(seconds: float, level_dbfs: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    x = np.sin(2 * np.pi * 200 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2)
    x = x / np.sqrt(np.mean(x**2)) * 10 ** (level_dbfs / 20)
    return np.rint(x * 32768).astype(np.int16)


def test_replies_follow_the_users_level_and_whisper_back_to_a_quiet_turn() -> None:
    cfg = SimConfig(reply_follow_level=True, whisper_below_dbfs=-30.0, latency_ms=0)
    gap = np.zeros(RATE, np.int16)
    x = np.concatenate([gap, speech_like(1.0, -20), gap, speech_like(1.0, -36), gap])
    e = SimEngine(cfg)
    sched = [d for ev, _, d in feed(e, x) if ev == "reply_scheduled"]
    assert [d["voice"] for d in sched] == ["tone", "whisper"]
    assert abs(sched[0]["reply_gain_db"]) < 1.5 and sched[1]["reply_gain_db"] < -12


def test_steady_noise_does_not_hold_a_turn_open_and_a_long_tone_stays_one_turn() -> None:
    rng = np.random.default_rng(0)
    speech = speech_like(1.5, -20)
    noise = np.rint(rng.standard_normal(6 * RATE) * 10 ** (-32 / 20) * 32768).astype(np.int16)
    x = noise.copy()
    x[RATE : RATE + speech.size] += speech
    for margin, ends in ((18.0, True), (None, False)):
        events = feed(SimEngine(SimConfig(noise_floor_margin_db=margin)), x)
        assert any(ev == "speech_end" for ev, _, _ in events) is ends
    # a 6 s tone is one turn with the floor gate on or off: a sine is never the noise floor
    long = np.concatenate([np.zeros(8000, np.int16), tone(300, 6.0, RATE).pcm,
                           np.zeros(RATE, np.int16)])  # fmt: skip
    for margin in (18.0, None):
        ends = [t for ev, t, _ in feed(SimEngine(SimConfig(noise_floor_margin_db=margin)), long)
                if ev == "speech_end"]  # fmt: skip
        assert len(ends) == 1 and ends[0] > 6.5
