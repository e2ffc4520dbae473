"""Speech activity: webrtcvad + energy gate, streaming and whole-track, against known tracks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.analysis.activity import (
    ActivityDetector,
    ActivityParams,
    level_dbfs,
    segments_from_events,
    speech_segments,
)
from rig.errors import ConfigError

RATES = (8000, 16000, 22050, 32000, 44100, 48000)


def tone(rate: int, dur_s: float, amp: float = 0.3, f_hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(dur_s * rate)) / rate
    return (amp * np.sin(2 * np.pi * f_hz * t)).astype(np.float32)


def place(rate: int, total_s: float, parts: list[tuple[float, np.ndarray]]) -> np.ndarray:
    x = np.zeros(round(total_s * rate), dtype=np.float32)
    for at_s, clip in parts:
        i = round(at_s * rate)
        x[i : i + clip.size] += clip
    return x


def espeak(tmp_path: Path, text: str, rate: int) -> np.ndarray:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    out = tmp_path / f"{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-w", str(out), text], check=True, capture_output=True)
    import soxr

    x, r = sf.read(out, dtype="float32")
    return np.asarray(soxr.resample(x, r, rate), dtype=np.float32)


def test_params_validate_and_record() -> None:
    with pytest.raises(ConfigError):
        ActivityParams(frame_ms=25)
    with pytest.raises(ConfigError):
        ActivityParams(vad_aggressiveness=4)
    with pytest.raises(ConfigError):
        ActivityParams(vad_rate_hz=22050)
    d = ActivityParams(energy_dbfs=-40.0).as_dict()
    assert d["energy_dbfs"] == -40.0 and d["frame_ms"] == 20 and "hangover_ms" in d


def test_level_dbfs_scales() -> None:
    assert level_dbfs(np.ones(100, np.float32)) == pytest.approx(0.0)
    assert level_dbfs(tone(16000, 1.0, amp=1.0)) == pytest.approx(-3.01, abs=0.02)
    assert level_dbfs(np.full(100, 16384, np.int16)) == pytest.approx(-6.02, abs=0.01)
    assert level_dbfs(np.zeros(10, np.float32)) == -np.inf


@pytest.mark.parametrize("rate", RATES)
def test_silence_has_no_speech(rate: int) -> None:
    assert speech_segments(np.zeros(rate * 2, np.float32), rate) == []


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("frame_ms", [10, 20, 30])
def test_tone_burst_boundaries(rate: int, frame_ms: int) -> None:
    x = place(rate, 3.0, [(1.0, tone(rate, 1.0))])
    segs = speech_segments(x, rate, ActivityParams(frame_ms=frame_ms))
    assert len(segs) == 1
    start, end = segs[0]
    # boundaries are frame-quantized: within one frame of the truth
    assert abs(start - 1.0) <= frame_ms / 1000 + 1e-9
    assert abs(end - 2.0) <= frame_ms / 1000 + 1e-9


def test_energy_gate_rejects_quiet_sound_the_vad_accepts() -> None:
    rate = 16000
    quiet = tone(rate, 1.0, amp=0.1 * np.sqrt(2))  # -20 dBFS
    assert level_dbfs(quiet) == pytest.approx(-20.0, abs=0.01)
    assert speech_segments(quiet, rate, ActivityParams(energy_dbfs=-100.0)) == [(0.0, 1.0)]
    assert speech_segments(quiet, rate, ActivityParams(energy_dbfs=-19.0)) == []


def test_vad_rejects_loud_hum_the_gate_accepts() -> None:
    rate = 16000
    hum = tone(rate, 2.0, amp=0.5, f_hz=100.0)
    segs = speech_segments(hum, rate)
    assert sum(e - s for s, e in segs) < 0.2  # only webrtcvad's own start-up frames


def test_hangover_merges_short_gaps_and_min_speech_drops_blips() -> None:
    rate = 16000
    x = place(
        rate,
        4.0,
        [
            (0.5, tone(rate, 0.5)),
            (1.1, tone(rate, 0.5)),
            (2.2, tone(rate, 0.5)),
            (3.5, tone(rate, 0.02)),
        ],
    )
    segs = speech_segments(x, rate, ActivityParams(hangover_ms=200, min_speech_ms=60))
    # 100 ms gap merged, 600 ms gap kept, 20 ms blip dropped
    assert [(round(s, 2), round(e, 2)) for s, e in segs] == [(0.5, 1.6), (2.2, 2.7)]
    split = speech_segments(x, rate, ActivityParams(hangover_ms=60, min_speech_ms=0))
    assert len(split) == 4


@pytest.mark.parametrize("rate", [16000, 22050])
def test_real_speech_is_found_where_it_was_placed(tmp_path: Path, rate: int) -> None:
    clip = espeak(tmp_path, "Could you tell me how long the train to Berlin takes?", rate)
    loud = np.flatnonzero(np.abs(clip) > 1e-2)
    true_start, true_end = 2.0 + loud[0] / rate, 2.0 + loud[-1] / rate
    x = place(rate, 2.0 + clip.size / rate + 1.0, [(2.0, clip)])
    segs = speech_segments(x, rate)
    assert segs, "speech not detected"
    assert abs(segs[0][0] - true_start) < 0.05
    assert abs(segs[-1][1] - true_end) < 0.1
    # a sentence read at a normal pace is one segment or a few with short gaps
    assert sum(e - s for s, e in segs) > 0.8 * (true_end - true_start)


@pytest.mark.parametrize("rate", [16000, 44100])
def test_streaming_matches_whole_track_and_honours_t_ns(rate: int) -> None:
    x = place(rate, 4.0, [(0.7, tone(rate, 0.8)), (2.3, tone(rate, 1.1))])
    whole = speech_segments(x, rate)
    t0_ns = 123_456_789_000
    det = ActivityDetector(rate)
    events = []
    rng = np.random.default_rng(1)
    i = 0
    while i < x.size:
        n = int(rng.integers(1, 2000))
        events += det.feed(x[i : i + n], t0_ns + round(i * 1e9 / rate))
        i += n
    events += det.close()
    assert [e.kind for e in events] == ["start", "end"] * len(whole)
    streamed = segments_from_events(events, t0_ns)
    assert np.allclose(streamed, whole, atol=1e-6)


def test_gap_between_chunks_moves_later_frames() -> None:
    rate = 16000
    first = place(rate, 1.0, [])
    second = place(rate, 2.0, [(0.5, tone(rate, 1.0))])
    det = ActivityDetector(rate)
    ev = det.feed(first, 0) + det.feed(second, 10_000_000_000) + det.close()
    assert segments_from_events(ev) == [(10.5, 11.5)]


def test_int16_equals_float() -> None:
    rate = 16000
    x = place(rate, 3.0, [(1.0, tone(rate, 1.0))])
    pcm = np.round(x * 32767).astype(np.int16)
    assert speech_segments(pcm, rate) == speech_segments(x, rate)


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ConfigError):
        speech_segments(np.zeros((100, 2), np.float32), 16000)
    with pytest.raises(ConfigError):
        speech_segments(np.zeros(100, np.int32), 16000)
    with pytest.raises(ConfigError):
        ActivityDetector(0)
    det = ActivityDetector(16000)
    det.close()
    with pytest.raises(ConfigError):
        det.feed(np.zeros(10, np.float32), 0)
