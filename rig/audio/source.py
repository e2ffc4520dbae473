"""Audio sources for the uplink: WAV files, silence, tones, and sequences of them.

How this works: a source yields mono int16 PCM at the session's rate, `read(n)` at a time.
A WAV file is read in blocks, downmixed explicitly (mean of channels), and converted with a
streaming soxr resampler that keeps its state across blocks (never chunk-by-chunk without
state, which clicks at every boundary). Every conversion is described in `describe()` so the
manifest records exactly what was played.

Sources are prepared before the stream starts: `WavSource` decodes and resamples the whole
file up front (`load()`), so nothing on the audio loop touches the disk or the resampler.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import soundfile as sf
import soxr

from rig.audio.pcm import Pcm16, to_int16
from rig.errors import AudioInputError

BLOCK_FRAMES = 16_384
SUPPORTED_CHANNELS = 8


class AudioSource(Protocol):
    sample_rate: int

    def read(self, n_samples: int) -> Pcm16:
        """Up to n samples; fewer (or none) at the end."""

    @property
    def remaining(self) -> int: ...

    def describe(self) -> dict[str, Any]: ...


class ArraySource:
    """A prepared mono int16 array, read from the front."""

    def __init__(self, pcm: Pcm16, sample_rate: int, info: dict[str, Any] | None = None) -> None:
        self.pcm = pcm
        self.sample_rate = sample_rate
        self.pos = 0
        self._info = info or {"kind": "array"}

    def read(self, n_samples: int) -> Pcm16:
        out = self.pcm[self.pos : self.pos + n_samples]
        self.pos += len(out)
        return out

    @property
    def remaining(self) -> int:
        return len(self.pcm) - self.pos

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate

    def describe(self) -> dict[str, Any]:
        return {**self._info, "samples": len(self.pcm), "sample_rate": self.sample_rate}


def silence(duration_s: float, sample_rate: int) -> ArraySource:
    n = round(duration_s * sample_rate)
    return ArraySource(
        np.zeros(n, dtype=np.int16), sample_rate, {"kind": "silence", "duration_s": duration_s}
    )


def tone(
    freq_hz: float, duration_s: float, sample_rate: int, level_dbfs: float = -12.0
) -> ArraySource:
    n = round(duration_s * sample_rate)
    amp = 10 ** (level_dbfs / 20) * np.sqrt(2)
    t = np.arange(n) / sample_rate
    x = amp * np.sin(2 * np.pi * freq_hz * t)
    ramp = min(n // 2, int(0.005 * sample_rate))  # 5 ms fades: no clicks, crisp edges
    if ramp:
        env = np.ones(n)
        env[:ramp] = np.linspace(0, 1, ramp)
        env[n - ramp :] = np.linspace(1, 0, ramp)
        x = x * env
    info = {"kind": "tone", "freq_hz": freq_hz, "duration_s": duration_s, "level_dbfs": level_dbfs}
    return ArraySource(to_int16(x), sample_rate, info)


@dataclass(frozen=True, slots=True)
class WavInfo:
    path: str
    sample_rate: int
    channels: int
    frames: int
    subtype: str
    format: str


def _check_riff(path: str) -> None:
    """Catch truncated WAVs that libsndfile would silently shorten."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
            return  # not a RIFF WAV: let libsndfile judge it
        if head[:4] == b"RF64":
            return
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            chunk = f.read(8)
            if len(chunk) < 8:
                break
            cid, csize = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if cid == b"data":
                have = size - pos - 8
                if csize != 0xFFFFFFFF and csize > have:
                    raise AudioInputError(
                        path,
                        f"truncated WAV: header promises {csize} bytes of audio, file holds {have}",
                    )
                return
            pos += 8 + csize + (csize & 1)
        raise AudioInputError(path, "truncated WAV: no data chunk")


def probe_wav(path: str) -> WavInfo:
    if not os.path.exists(path):
        raise AudioInputError(path, "no such file")
    if os.path.isdir(path):
        raise AudioInputError(path, "is a directory, not an audio file")
    if os.path.getsize(path) == 0:
        raise AudioInputError(path, "empty file")
    _check_riff(path)
    try:
        info = sf.info(path)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise AudioInputError(path, f"unsupported or unreadable audio format ({exc})") from exc
    if info.frames <= 0:
        raise AudioInputError(path, "empty: the file holds no audio frames")
    if not 1 <= info.channels <= SUPPORTED_CHANNELS:
        raise AudioInputError(path, f"unsupported channel count {info.channels}")
    return WavInfo(
        path, int(info.samplerate), info.channels, info.frames, info.subtype, info.format
    )


def load_wav(
    path: str,
    sample_rate: int,
    quality: str = "HQ",
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    channel: int | str | None = None,
) -> ArraySource:
    """Decode, pick a channel or downmix (mean), and resample (streaming soxr) a file, or a
    slice of it (`start_s`..`end_s`, read after a seek: never the whole file), to mono int16."""
    return load_channels(path, sample_rate, [channel], quality, start_s=start_s, end_s=end_s)[0]


def load_channels(
    path: str,
    sample_rate: int,
    channels: list[int | str | None],
    quality: str = "HQ",
    *,
    start_s: float | None = None,
    end_s: float | None = None,
) -> list[ArraySource]:
    """One mono track per entry of `channels` (an index, or "mean"/None: the mean of all),
    from the same slice of one file, each through its own streaming resampler."""
    info = probe_wav(path)
    for ch in channels:
        if isinstance(ch, int) and not 0 <= ch < info.channels:
            raise AudioInputError(path, f"no channel {ch}: the file has {info.channels}")
    first = 0 if start_s is None else round(start_s * info.sample_rate)
    last = info.frames if end_s is None else min(info.frames, round(end_s * info.sample_rate))
    if first >= info.frames or last <= first:
        raise AudioInputError(path, f"empty slice: frames {first}-{last} of {info.frames}")

    def resampler() -> Any:
        if info.sample_rate == sample_rate:
            return None
        return soxr.ResampleStream(
            info.sample_rate, sample_rate, 1, dtype="float32", quality=quality
        )

    streams = [resampler() for _ in channels]
    parts: list[list[np.ndarray[Any, np.dtype[np.float32]]]] = [[] for _ in channels]
    read_frames = 0
    try:
        with sf.SoundFile(path) as f:
            if first:
                f.seek(first)
            left = last - first
            while True:
                block = f.read(min(BLOCK_FRAMES, left), dtype="float32", always_2d=True)
                left -= len(block)
                done = left <= 0 or len(block) == 0
                read_frames += len(block)
                for k, ch in enumerate(channels):
                    if isinstance(ch, int):
                        mono = np.ascontiguousarray(block[:, ch])
                    elif block.shape[1] > 1:
                        mono = block.mean(axis=1, dtype=np.float32)
                    else:
                        mono = block[:, 0]
                    rs = streams[k]
                    if rs is not None:
                        mono = rs.resample_chunk(np.ascontiguousarray(mono), last=done)
                    parts[k].append(mono)
                if done:
                    break
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise AudioInputError(path, f"read failed after {read_frames} frames ({exc})") from exc
    out = []
    for k, ch in enumerate(channels):
        pcm = to_int16(np.concatenate(parts[k])) if parts[k] else np.zeros(0, np.int16)
        if pcm.size == 0:
            raise AudioInputError(path, "empty: no audio after decoding")
        sliced = start_s is not None or end_s is not None
        conversion = {
            "kind": "wav",
            "path": os.path.abspath(path),
            "source_rate": info.sample_rate,
            "source_channels": info.channels,
            "source_subtype": info.subtype,
            "source_frames": info.frames,
            "downmix": "mean" if info.channels > 1 and not isinstance(ch, int) else None,
            "resampler": f"soxr {soxr.__version__} {quality} streaming" if streams[k] else None,
            **({"channel": ch} if isinstance(ch, int) else {}),
            **({"start_frame": first, "end_frame": last} if sliced else {}),
        }
        out.append(ArraySource(pcm, sample_rate, conversion))
    return out
