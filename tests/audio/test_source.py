import os
import struct

import numpy as np
import pytest
import soundfile as sf

from rig.audio.source import load_wav, probe_wav, silence, tone
from rig.errors import AudioInputError


def _sine(rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    x = 0.5 * np.sin(2 * np.pi * 440 * t)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


@pytest.mark.parametrize(
    ("rate", "channels", "subtype"),
    [
        (16000, 1, "PCM_16"),
        (44100, 2, "PCM_24"),
        (48000, 1, "FLOAT"),
        (8000, 1, "PCM_U8"),
        (22050, 6, "PCM_32"),
    ],
)
def test_any_common_wav_is_converted_and_the_conversion_recorded(
    tmp_path, rate: int, channels: int, subtype: str
) -> None:
    path = str(tmp_path / "in.wav")
    sf.write(path, _sine(rate, 1.0, channels), rate, subtype=subtype)
    src = load_wav(path, 16000)
    assert src.sample_rate == 16000
    assert abs(len(src.pcm) - 16000) <= 2
    info = src.describe()
    assert info["source_rate"] == rate and info["source_channels"] == channels
    assert info["downmix"] == ("mean" if channels > 1 else None)
    assert (info["resampler"] is None) == (rate == 16000)
    # the tone survives: RMS of a 0.5 sine is ~0.354 of full scale
    rms = np.sqrt(np.mean((src.pcm[1000:-1000].astype(float) / 32768) ** 2))
    assert 0.33 < rms < 0.37


def test_streaming_resampler_has_no_block_seams(tmp_path) -> None:
    path = str(tmp_path / "long.wav")
    sf.write(path, _sine(44100, 3.0), 44100)  # several 16k-frame blocks
    pcm = load_wav(path, 16000).pcm.astype(float)
    # a pure sine has a smooth second difference; a seam would spike it
    d2 = np.abs(np.diff(pcm[100:-100], 2))
    assert d2.max() < 3 * np.percentile(d2, 99)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(AudioInputError, match="no such file") as e:
        load_wav(str(tmp_path / "nope.wav"), 16000)
    assert "nope.wav" in str(e.value)


def test_empty_file(tmp_path) -> None:
    p = tmp_path / "empty.wav"
    p.write_bytes(b"")
    with pytest.raises(AudioInputError, match="empty"):
        probe_wav(str(p))


def test_header_only_wav_has_no_frames(tmp_path) -> None:
    p = str(tmp_path / "zero.wav")
    sf.write(p, np.zeros(0), 16000)
    with pytest.raises(AudioInputError, match="empty"):
        load_wav(p, 16000)


def test_truncated_wav_is_refused_not_shortened(tmp_path) -> None:
    p = str(tmp_path / "trunc.wav")
    sf.write(p, _sine(16000, 1.0), 16000, subtype="PCM_16")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 10_000)
    with pytest.raises(AudioInputError, match="truncated"):
        load_wav(p, 16000)


def test_garbage_is_unsupported(tmp_path) -> None:
    p = tmp_path / "garbage.wav"
    p.write_bytes(b"this is not audio at all" * 10)
    with pytest.raises(AudioInputError, match="unsupported or unreadable") as e:
        load_wav(str(p), 16000)
    assert "garbage.wav" in str(e.value)


def test_riff_without_data_chunk(tmp_path) -> None:
    p = tmp_path / "nodata.wav"
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    p.write_bytes(b"RIFF" + struct.pack("<I", 4 + 8 + 16) + b"WAVE" + b"fmt " + fmt)
    with pytest.raises(AudioInputError, match="no data chunk"):
        load_wav(str(p), 16000)


def test_generated_sources() -> None:
    s = silence(0.5, 16000)
    assert len(s.pcm) == 8000 and not s.pcm.any()
    t = tone(1000, 0.25, 16000, level_dbfs=-6)
    assert len(t.pcm) == 4000 and np.abs(t.pcm).max() > 20000
    assert t.describe()["kind"] == "tone"
    assert len(t.read(100)) == 100 and t.remaining == 3900
