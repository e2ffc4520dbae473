"""The signal part of calibration: known delays (whole and fractional), noise, refusal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.device.calibrate import (
    CalibrationRefused,
    correlate_valid,
    fft_resample,
    find_probe,
    log_chirp,
    mls,
    probe_train,
    summarize,
)
from rig.device.timeinfo import FrameClock, FrameStamp, check_pa_clock, cycle_skew_ns

RATE = 48_000


def delayed(x: np.ndarray, delay_frames: float, n: int) -> np.ndarray:
    """x delayed by a (fractional) number of frames: an exact band-limited shift via the FFT."""
    buf = np.zeros(n)
    buf[: len(x)] = x
    freqs = np.fft.rfftfreq(n)
    return np.fft.irfft(np.fft.rfft(buf) * np.exp(-2j * np.pi * freqs * delay_frames), n)


@pytest.mark.parametrize("delay", [0.0, 1.0, 480.0, 1000.25, 1000.5, 2317.73])
def test_chirp_delay_recovered_to_a_hundredth_of_a_sample(delay: float) -> None:
    probe = log_chirp(RATE)
    rx = delayed(probe, delay, RATE)
    det = find_probe(probe, rx)
    assert det is not None
    assert det.position_frames == pytest.approx(delay, abs=0.01)


@settings(max_examples=25, deadline=None)
@given(delay=st.floats(min_value=10.0, max_value=20_000.0), seed=st.integers(0, 2**31))
def test_chirp_delay_recovered_in_noise(delay: float, seed: int) -> None:
    probe = log_chirp(RATE)
    rng = np.random.default_rng(seed)
    # noise power equal to the probe's: 0 dB SNR
    rx = delayed(probe, delay, RATE) + rng.normal(0, probe.std(), RATE)
    det = find_probe(probe, rx)
    assert det is not None
    assert det.position_frames == pytest.approx(delay, abs=0.1)


def test_mls_is_balanced_and_found() -> None:
    seq = mls(12)
    assert len(seq) == 4095
    assert int(np.sum(seq > 0)) == 2048  # an m-sequence has one more one than zero
    rx = np.concatenate([np.zeros(777), 0.3 * seq, np.zeros(3000)])
    det = find_probe(seq, rx)
    assert det is not None and det.position_frames == pytest.approx(777, abs=0.01)


def test_polarity_inverted_loopback_still_found() -> None:
    probe = log_chirp(RATE)
    det = find_probe(probe, -delayed(probe, 333.0, RATE))
    assert det is not None and det.position_frames == pytest.approx(333.0, abs=0.01)


def test_no_probe_in_noise_is_not_a_number() -> None:
    rng = np.random.default_rng(7)
    assert find_probe(log_chirp(RATE), rng.normal(0, 0.2, RATE)) is None


def test_search_window_is_honoured() -> None:
    probe = log_chirp(RATE)
    train, starts = probe_train(probe, 3, gap_frames=RATE // 2)
    rx = delayed(train, 100.0, len(train) + RATE)
    period = starts[1]
    det = find_probe(probe, rx, start=period - 50, stop=period + len(probe) + 500)
    assert det is not None and det.position_frames == pytest.approx(period + 100, abs=0.01)
    assert find_probe(probe, rx, start=10, stop=50) is None  # too short to hold the probe


def test_summarize_statistics() -> None:
    stats = summarize([5.0, 5.2, 5.1], max_spread_ms=0.5)
    assert stats.repeats == 3
    assert stats.mean_ms == pytest.approx(5.1)
    assert stats.median_ms == pytest.approx(5.1)
    assert stats.spread_ms == pytest.approx(0.2)
    assert stats.std_ms == pytest.approx(0.1)


def test_summarize_refuses_disagreeing_repeats() -> None:
    with pytest.raises(CalibrationRefused, match="spread 2.000 ms") as info:
        summarize([10.0, 12.0, 10.5], max_spread_ms=1.0)
    assert info.value.round_trips_ms == [10.0, 12.0, 10.5]


def test_summarize_refuses_missing_repeats() -> None:
    with pytest.raises(CalibrationRefused, match="only 2 of 5"):
        summarize([1.0, 1.0], expected_repeats=5)
    with pytest.raises(CalibrationRefused, match="1 of 5 repeats were not found"):
        summarize([1.0, 1.0, 1.0, 1.0], expected_repeats=5)


def test_bad_probe_parameters() -> None:
    with pytest.raises(ValueError):
        log_chirp(RATE, f0_hz=30_000)
    with pytest.raises(ValueError):
        mls(5)
    with pytest.raises(ValueError):
        probe_train(log_chirp(RATE), 0, 10)


def stamps_for(rate: int, block: int, n: int, t0_ns: int, jitter_ns: list[int]) -> list[FrameStamp]:
    return [
        FrameStamp(k * block, block, t0_ns + k * block * 1_000_000_000 // rate + jitter_ns[k])
        for k in range(n)
    ]


def test_frame_clock_ignores_jitter_and_a_start_up_stall() -> None:
    rng = np.random.default_rng(3)
    jitter = [int(j) for j in rng.integers(0, 400_000, 200)]  # 0-0.4 ms late
    stamps = stamps_for(RATE, 480, 200, 5_000_000_000, jitter)
    # the first 5 blocks came 1.5 s "early" (pre-fill before a stall), as on ALSA/pulse
    stamps = [
        FrameStamp(s.frame, s.n_frames, s.t_ns - 1_500_000_000) if i < 5 else s
        for i, s in enumerate(stamps)
    ]
    clock = FrameClock(stamps, RATE)
    frame = 100 * 480 + 17
    true_ns = 5_000_000_000 + frame * 1e9 / RATE
    assert abs(clock.time_ns(frame) - true_ns) < 400_000
    assert clock.frame_at(true_ns) == pytest.approx(frame, abs=0.4e-3 * RATE)


def test_cycle_skew_is_the_input_callbacks_lead_over_the_output_of_the_same_cycle() -> None:
    """JACK serves both streams in one cycle; the input callback runs first, so its stamps
    lead the output's by its own run (here 30-70 us): the median lead, not the jitter."""
    rng = np.random.default_rng(5)
    start, block = 5_000_000_000, 256
    outs = stamps_for(RATE, block, 300, start, [int(j) for j in rng.integers(0, 200_000, 300)])
    lead = [int(x) for x in rng.integers(30_000, 70_000, 300)]
    ins = [  # the input stream started a cycle later: its frame 0 is the output's 256
        FrameStamp(s.frame - block, block, s.t_ns - lead[i]) for i, s in enumerate(outs[1:])
    ]
    skew = cycle_skew_ns(ins, outs, RATE)
    assert skew is not None and skew == pytest.approx(-50_000, abs=3_000)
    # two streams on clocks of their own (half a block apart here): no cycle to share
    apart = [FrameStamp(s.frame, s.n_frames, s.t_ns + 2_666_667) for s in ins]
    assert cycle_skew_ns(apart, outs, RATE) is None
    assert cycle_skew_ns(ins[:3], outs[:3], RATE) is None


def test_pa_clock_consistent_only_when_it_tracks_the_shared_clock() -> None:
    t0 = 7_000_000_000
    good = [
        FrameStamp(
            k * 256,
            256,
            t0 + k * 5_333_333,
            pa_time_s=12.5 + k * 256 / RATE,
            pa_current_s=12.5 + k * 256 / RATE + 0.005,
        )
        for k in range(100)
    ]
    check = check_pa_clock(good)
    assert check.consistent, check.reason
    assert check.to_shared_ns(12.5) == pytest.approx(t0, abs=10_000)
    assert check.pa_latency_ms == pytest.approx(5.0)
    # a clock that runs 16 % fast (seen for ALSA/pulse ADC times)
    fast = [
        FrameStamp(s.frame, 256, s.t_ns, pa_time_s=12.5 + k * 256 / RATE * 1.16)
        for k, s in enumerate(good)
    ]
    assert not check_pa_clock(fast).consistent
    # a stale time that repeats
    stale = [
        FrameStamp(s.frame, 256, s.t_ns, pa_time_s=12.5 + (k // 4) * 0.02)
        for k, s in enumerate(good)
    ]
    assert "does not advance" in check_pa_clock(stale).reason
    # a time that jumps by 200 ms half-way
    jumpy = [
        FrameStamp(s.frame, 256, s.t_ns, pa_time_s=s.pa_time_s + (0.2 if k > 50 else 0))
        for k, s in enumerate(good)
    ]
    assert not check_pa_clock(jumpy).consistent
    with pytest.raises(ValueError):
        check_pa_clock(jumpy).to_shared_ns(1.0)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 3000),
    m=st.integers(1, 400),
    seed=st.integers(0, 2**31),
)
def test_fft_correlation_is_scipys(n: int, m: int, seed: int) -> None:
    """The numpy correlation gives what scipy.signal.correlate(valid, fft) gave (scipy is a
    test tool only: calibration must run on the base dependencies)."""
    sps = pytest.importorskip("scipy.signal")
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=max(n, m)), rng.normal(size=m)
    ours = correlate_valid(x, y)
    theirs = sps.correlate(x, y, mode="valid", method="direct")
    assert ours.shape == theirs.shape
    assert np.allclose(ours, theirs, atol=1e-9 * max(1.0, float(np.abs(theirs).max())))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 200), num=st.integers(2, 4000), seed=st.integers(0, 2**31))
def test_fft_resample_is_scipys(n: int, num: int, seed: int) -> None:
    sps = pytest.importorskip("scipy.signal")
    x = np.random.default_rng(seed).normal(size=n)
    assert np.allclose(fft_resample(x, num), sps.resample(x, num), atol=1e-12)


def test_fft_resample_interpolates_a_band_limited_signal() -> None:
    """Without scipy: a sampled periodic sine comes back exactly on the fine grid."""
    n, factor = 33, 32
    t = np.arange(n) / n
    fine_t = np.arange(n * factor) / (n * factor)
    x = np.sin(2 * np.pi * 3 * t + 0.4)
    assert np.allclose(fft_resample(x, n * factor), np.sin(2 * np.pi * 3 * fine_t + 0.4))
