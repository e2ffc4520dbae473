"""Conditions rendered offline: exact levels, exact SNR, a band-limited phone line, seeded
loss, and a clear error when a level would clip."""

from __future__ import annotations

import numpy as np
import pytest

from rig.conditions import line
from rig.conditions.noise import NoiseCache, rng
from rig.conditions.render import ConditionError, render_turn
from rig.conditions.spec import Condition, Line, Noise

RATE = 16_000


def voice(seconds: float = 1.5, level: float = 0.1) -> np.ndarray:
    """A buzzy 'vowel' with 0.2 s of silence on each side (int16)."""
    t = np.arange(round(seconds * RATE)) / RATE
    x = sum(np.sin(2 * np.pi * k * 140 * t) / k for k in range(1, 20))
    x = level * x / np.abs(x).max() * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))
    pad = np.zeros(round(0.2 * RATE))
    return np.rint(np.concatenate([pad, x, pad]) * 32768).astype(np.int16)


SPAN = (round(0.2 * RATE), round(1.7 * RATE))


def rms_db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean((x.astype(np.float64) / 32768) ** 2))


def test_level_targets_are_met_exactly_on_the_int16_samples() -> None:
    pcm = voice()
    r = render_turn(pcm, SPAN, Condition(("target_rms_dbfs", -35.0)), RATE, loop=None,
                    noise_pos=0, loss_gen=None)  # fmt: skip
    assert abs(rms_db(r.pcm[SPAN[0] : SPAN[1]]) + 35.0) < 0.01
    assert r.result["level"]["rms_dbfs"] == pytest.approx(-35.0, abs=0.01)
    r = render_turn(pcm, SPAN, Condition(("target_peak_dbfs", -1.0)), RATE, loop=None,
                    noise_pos=0, loss_gen=None)  # fmt: skip
    peak = 20 * np.log10(np.abs(r.pcm.astype(np.float64)).max() / 32768)
    assert abs(peak + 1.0) < 0.01
    r = render_turn(pcm, SPAN, Condition(("gain_db", -6.0)), RATE, loop=None, noise_pos=0,
                    loss_gen=None)  # fmt: skip
    assert rms_db(r.pcm[SPAN[0] : SPAN[1]]) - rms_db(pcm[SPAN[0] : SPAN[1]]) == pytest.approx(
        -6.0, abs=0.01
    )


def test_target_lufs_is_met_by_bs1770() -> None:
    pyloudnorm = pytest.importorskip("pyloudnorm")
    r = render_turn(voice(), SPAN, Condition(("target_lufs", -23.0)), RATE, loop=None,
                    noise_pos=0, loss_gen=None)  # fmt: skip
    meter = pyloudnorm.Meter(RATE)
    assert meter.integrated_loudness(r.pcm / 32768.0) == pytest.approx(-23.0, abs=0.05)


def test_a_level_that_would_clip_is_refused_with_the_numbers() -> None:
    with pytest.raises(ConditionError, match=r"would clip \d+ samples.*peak \+"):
        render_turn(voice(level=0.5), SPAN, Condition(("target_rms_dbfs", -3.0)), RATE,
                    loop=None, noise_pos=0, loss_gen=None)  # fmt: skip


@pytest.mark.parametrize("kind", ["white", "pink"])
def test_noise_reaches_the_snr_over_the_speech_span(kind: str) -> None:
    if kind == "pink":
        pytest.importorskip("colorednoise")
    pcm = voice()
    loop = NoiseCache(RATE, seed=7).loop(kind)
    r = render_turn(pcm, SPAN, Condition(noise=Noise(5.0, kind)), RATE, loop=loop,
                    noise_pos=12_345, loss_gen=None)  # fmt: skip
    a, b = SPAN
    speech = pcm[a:b].astype(np.float64)
    noise = r.pcm[a:b].astype(np.float64) - speech
    snr = 10 * np.log10(np.sum(speech**2) / np.sum(noise**2))
    assert abs(snr - 5.0) < 0.05
    assert r.result["noise"]["achieved_snr_db"] == pytest.approx(snr, abs=0.01)
    # the noise is there outside the speech too (a room), and the bed continues it
    assert rms_db(r.pcm[:a]) > -60
    assert r.bed is not None
    after = r.bed.render(12_345 + len(pcm), 800)
    assert np.array_equal(after, r.bed.render(12_345 + len(pcm), 800))  # deterministic


def test_the_same_seed_gives_the_same_noise_and_another_seed_other_noise() -> None:
    a = NoiseCache(RATE, seed=1).loop("white")
    b = NoiseCache(RATE, seed=1).loop("white")
    c = NoiseCache(RATE, seed=2).loop("white")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_babble_is_made_of_other_turns() -> None:
    cache = NoiseCache(RATE, seed=0)
    loop = cache.loop("babble", corpus_key="x", corpus=[voice(1.0), voice(0.7, 0.05)])
    assert loop.size > RATE and abs(float(np.sqrt(np.mean(loop**2))) - 1.0) < 1e-3
    with pytest.raises(ValueError, match="babble needs other turns"):
        NoiseCache(RATE, 0).loop("babble", corpus_key="y", corpus=[])


def band_energy_db(x: np.ndarray, lo: float, hi: float) -> float:
    spec = np.abs(np.fft.rfft(x.astype(np.float64) * np.hanning(x.size))) ** 2
    f = np.fft.rfftfreq(x.size, 1 / RATE)
    return 10 * np.log10(np.sum(spec[(f >= lo) & (f < hi)]) + 1e-12)


def test_the_phone_line_is_band_limited_to_300_3400_hz() -> None:
    pytest.importorskip("scipy")
    white = rng(0, "test").standard_normal(2 * RATE) * 0.1
    pcm = np.rint(white * 32768).astype(np.int16)
    r = render_turn(pcm, (0, pcm.size), Condition(line=Line("phone")), RATE, loop=None,
                    noise_pos=0, loss_gen=None)  # fmt: skip
    out = r.pcm[RATE // 4 : -RATE // 4]
    passband = band_energy_db(out, 500, 3000) - 10 * np.log10(2500)
    low = band_energy_db(out, 20, 150) - 10 * np.log10(130)
    high = band_energy_db(out, 4200, 8000) - 10 * np.log10(3800)
    assert passband - low > 25  # per-Hz energy: 4th-order high-pass well below 300 Hz
    assert passband - high > 40  # nothing above 4 kHz survives 8 kHz sampling
    # and inside the band the line keeps the signal (mu-law is near-transparent at -20 dBFS)
    inside = band_energy_db(pcm[RATE // 4 : -RATE // 4], 500, 3000) - 10 * np.log10(2500)
    assert abs(passband - inside) < 1.5


def test_ulaw_round_trip_is_g711_quantisation() -> None:
    table = line.ulaw_table()
    assert table[32768] == 0 and np.unique(table).size == 255  # 256 codes, +0 and -0 alike
    x = np.array([1000, -1000, 20000], np.int16)
    y = line.ulaw(x)
    assert np.all(np.abs(y.astype(int) - x) <= np.abs(x) * 0.04)


@pytest.mark.parametrize("conceal", ["zero", "repeat"])
def test_lossy_line_drops_seeded_20ms_frames(conceal: str) -> None:
    pcm = voice()
    cond = Condition(line=Line("lossy", 0.2, None, conceal))
    a = render_turn(pcm, SPAN, cond, RATE, loop=None, noise_pos=0, loss_gen=rng(3, "l"))
    b = render_turn(pcm, SPAN, cond, RATE, loop=None, noise_pos=0, loss_gen=rng(3, "l"))
    assert np.array_equal(a.pcm, b.pcm)
    res = a.result["line"]
    frame = RATE // 50
    assert res["frames"] == -(-pcm.size // frame) and 0 < res["lost_frames"] < res["frames"]
    lost = line.lost_frames(pcm.size, RATE, 0.2, rng(3, "l"))
    k = int(np.flatnonzero(lost[10:])[0]) + 10  # a lost frame inside the speech
    seg = a.pcm[k * frame : (k + 1) * frame]
    if conceal == "zero":
        assert not seg.any()
    else:
        assert seg.any()  # the last frame that got through, played again
