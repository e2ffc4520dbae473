"""Speech activity: webrtcvad plus an energy gate, streaming or over a whole track.

How this works
--------------
Audio is cut into frames of `frame_ms` (10, 20 or 30 ms) at a rate webrtcvad accepts (8, 16,
32 or 48 kHz; other rates go through a soxr streaming resampler first). A frame is *speech*
when webrtcvad says so **and** its RMS level is at least `energy_dbfs` (both must agree: the
VAD alone fires on hiss and hum, the gate alone on any loud noise). Raw frame decisions are
smoothed by a small state machine:

    silence --speech frame--> pending --(speech for min_speech_ms)--> speaking
    pending --non-speech frame--> silence                (a blip: dropped)
    speaking --(non-speech for hangover_ms)--> silence   (a gap: merged into the segment)

Segment boundaries are back-dated to the first/last speech frame, so a segment's start and end
are where the speech is, not where the detector became sure of it; the events simply arrive
later (by up to `min_speech_ms` / `hangover_ms`). No clock is read: every chunk comes with the
`t_ns` of its first sample, and frame times are derived from it.

Levels are dBFS of the RMS with full scale 1.0 (int16 is divided by 32768): a full-scale
square wave is 0 dBFS, a full-scale sine -3 dBFS.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import soxr
import webrtcvad

from rig.core.units import NS_PER_S
from rig.errors import ConfigError

VAD_RATES_HZ: tuple[int, ...] = (8000, 16000, 32000, 48000)
VAD_FRAME_MS: tuple[int, ...] = (10, 20, 30)

Segment = tuple[float, float]
"""(start_s, end_s) on the track's timeline."""


@dataclass(frozen=True, slots=True)
class ActivityParams:
    """Every knob of the detector; `as_dict()` goes into the manifest."""

    vad_aggressiveness: int = 2
    """webrtcvad mode 0 (permissive) .. 3 (strict)."""
    frame_ms: int = 20
    energy_dbfs: float = -45.0
    """A frame below this RMS level is never speech."""
    hangover_ms: float = 200.0
    """Gaps shorter than this inside speech are merged (end of speech is declared after it)."""
    min_speech_ms: float = 60.0
    """Speech runs shorter than this are dropped as blips."""
    vad_rate_hz: int | None = None
    """Rate to run the VAD at when the input rate is not one it accepts (None: 16000)."""

    def __post_init__(self) -> None:
        if self.vad_aggressiveness not in (0, 1, 2, 3):
            raise ConfigError(f"vad_aggressiveness must be 0..3, got {self.vad_aggressiveness}")
        if self.frame_ms not in VAD_FRAME_MS:
            raise ConfigError(f"frame_ms must be one of {VAD_FRAME_MS}, got {self.frame_ms}")
        if self.hangover_ms < 0 or self.min_speech_ms < 0:
            raise ConfigError("hangover_ms and min_speech_ms must be >= 0")
        if self.vad_rate_hz is not None and self.vad_rate_hz not in VAD_RATES_HZ:
            raise ConfigError(f"vad_rate_hz must be one of {VAD_RATES_HZ}, got {self.vad_rate_hz}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ActivityEvent:
    """A speech segment started or ended at `t_ns` (back-dated to the speech itself)."""

    kind: Literal["start", "end"]
    t_ns: int


def level_dbfs(samples: npt.NDArray[Any]) -> float:
    """RMS level in dBFS (full scale 1.0); -inf for digital silence or an empty array."""
    x = as_float(samples)
    if x.size == 0:
        return -math.inf
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return 20.0 * math.log10(rms) if rms > 0 else -math.inf


def as_float(samples: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """Mono samples as float32 in [-1, 1]; int16 is scaled by 1/32768."""
    x = np.asarray(samples)
    if x.ndim != 1:
        raise ConfigError(f"activity needs mono 1-D samples, got shape {x.shape}")
    if x.dtype == np.int16:
        return x.astype(np.float32) / 32768.0
    if np.issubdtype(x.dtype, np.floating):
        return x.astype(np.float32, copy=False)
    raise ConfigError(f"activity needs int16 or float samples, got {x.dtype}")


class ActivityDetector:
    """Streaming detector: `feed(samples, t_ns)` chunks in order, collect start/end events.

    Chunks may have any length; `t_ns` is the time of the chunk's first sample on the shared
    clock (gaps between chunks are honoured: frame times come from the chunk that holds them).
    Call `close()` at the end of the stream to end an open segment.
    """

    def __init__(self, sample_rate: int, params: ActivityParams | None = None) -> None:
        if sample_rate <= 0:
            raise ConfigError(f"sample_rate must be positive, got {sample_rate}")
        self.params = params or ActivityParams()
        self.sample_rate = sample_rate
        if sample_rate in VAD_RATES_HZ:
            self.vad_rate_hz = sample_rate
        else:
            self.vad_rate_hz = self.params.vad_rate_hz or 16000
        self._resampler = (
            None
            if self.vad_rate_hz == sample_rate
            else soxr.ResampleStream(sample_rate, self.vad_rate_hz, 1, dtype="float32")
        )
        self._vad = webrtcvad.Vad(self.params.vad_aggressiveness)
        self._frame_n = self.vad_rate_hz * self.params.frame_ms // 1000
        self._frame_ns = self.params.frame_ms * 1_000_000
        self._min_frames = max(1, math.ceil(self.params.min_speech_ms / self.params.frame_ms))
        self._hang_frames = max(1, math.ceil(self.params.hangover_ms / self.params.frame_ms))
        self._threshold_rms = 10.0 ** (self.params.energy_dbfs / 20.0)
        self._pending = np.zeros(0, dtype=np.float32)  # VAD-rate samples not yet framed
        self._out_index = 0  # VAD-rate index of the first sample in _pending
        self._in_index = 0  # input samples fed so far
        self._anchors: deque[tuple[int, int]] = deque()  # (input index, t_ns) per chunk
        # smoothing state
        self._speaking = False
        self._run = 0  # consecutive speech frames (pending) or non-speech frames (speaking)
        self._run_start_ns = 0
        self._last_speech_end_ns = 0
        self._closed = False

    @property
    def speaking(self) -> bool:
        return self._speaking

    def feed(self, samples: npt.NDArray[Any], t_ns: int) -> list[ActivityEvent]:
        if self._closed:
            raise ConfigError("ActivityDetector.feed() after close()")
        x = as_float(samples)
        if x.size == 0:
            return []
        self._anchors.append((self._in_index, int(t_ns)))
        self._in_index += x.size
        y = x if self._resampler is None else self._resampler.resample_chunk(x)
        return self._consume(y)

    def close(self) -> list[ActivityEvent]:
        """End of stream: flush the resampler and end an open segment."""
        if self._closed:
            return []
        events: list[ActivityEvent] = []
        if self._resampler is not None:
            events += self._consume(self._resampler.resample_chunk(np.zeros(0, np.float32), True))
        self._closed = True
        if self._speaking:
            self._speaking = False
            events.append(ActivityEvent("end", self._last_speech_end_ns))
        return events

    def _time_of(self, out_index: int) -> int:
        """t_ns of VAD-rate sample `out_index`, from the chunk anchor that holds it."""
        in_pos = out_index * self.sample_rate / self.vad_rate_hz
        while len(self._anchors) > 1 and self._anchors[1][0] <= in_pos:
            self._anchors.popleft()
        idx, t_ns = self._anchors[0]
        return t_ns + round((in_pos - idx) * NS_PER_S / self.sample_rate)

    def _consume(self, y: npt.NDArray[np.float32]) -> list[ActivityEvent]:
        buf = np.concatenate((self._pending, y)) if self._pending.size else y
        n = self._frame_n
        n_frames = buf.size // n
        events: list[ActivityEvent] = []
        for k in range(n_frames):
            frame = buf[k * n : (k + 1) * n]
            t_ns = self._time_of(self._out_index + k * n)
            ev = self._step(self._is_speech(frame), t_ns)
            if ev is not None:
                events.append(ev)
        self._pending = buf[n_frames * n :].copy()
        self._out_index += n_frames * n
        return events

    def _is_speech(self, frame: npt.NDArray[np.float32]) -> bool:
        rms = float(np.sqrt(np.mean(np.square(frame, dtype=np.float64))))
        if rms < self._threshold_rms:
            return False
        pcm = (np.clip(frame, -1.0, 1.0) * 32767.0).astype("<i2")
        return bool(self._vad.is_speech(pcm.tobytes(), self.vad_rate_hz))

    def _step(self, speech: bool, t_ns: int) -> ActivityEvent | None:
        if not self._speaking:
            if not speech:
                self._run = 0
                return None
            if self._run == 0:
                self._run_start_ns = t_ns
            self._run += 1
            self._last_speech_end_ns = t_ns + self._frame_ns
            if self._run >= self._min_frames:
                self._speaking, self._run = True, 0
                return ActivityEvent("start", self._run_start_ns)
            return None
        if speech:
            self._run = 0
            self._last_speech_end_ns = t_ns + self._frame_ns
            return None
        self._run += 1
        if self._run >= self._hang_frames:
            self._speaking, self._run = False, 0
            return ActivityEvent("end", self._last_speech_end_ns)
        return None


def segments_from_events(events: list[ActivityEvent], t0_ns: int = 0) -> list[Segment]:
    """Pair start/end events into (start_s, end_s) relative to `t0_ns`."""
    out: list[Segment] = []
    start: int | None = None
    for ev in events:
        if ev.kind == "start":
            start = ev.t_ns
        elif start is not None:
            out.append(((start - t0_ns) / NS_PER_S, (ev.t_ns - t0_ns) / NS_PER_S))
            start = None
    return out


def speech_segments(
    samples: npt.NDArray[Any], sample_rate: int, params: ActivityParams | None = None
) -> list[Segment]:
    """Speech segments of a whole track, in seconds from its first sample."""
    det = ActivityDetector(sample_rate, params)
    events = det.feed(samples, 0) + det.close()
    return segments_from_events(events)


def refine_segments(
    x: npt.NDArray[Any], sample_rate: int, segs: list[Segment], p: ActivityParams
) -> list[Segment]:
    """Segment boundaries moved from the VAD frame grid to the sample: a start to the first
    sample at or above the energy gate's level, an end to just after the last one, each
    looked for within one frame either side (never into a neighbouring segment). A
    boundary with no such sample nearby stays where the VAD put it."""
    amp = 10 ** (p.energy_dbfs / 20.0) * (32768.0 if x.dtype == np.int16 else 1.0)
    frame = p.frame_ms / 1000.0
    out: list[Segment] = []
    for i, (s, e) in enumerate(segs):
        prev = segs[i - 1][1] if i else 0.0
        nxt = segs[i + 1][0] if i + 1 < len(segs) else float("inf")
        lo = max(round(max(s - frame, prev) * sample_rate), 0)
        hi = min(round(min(s + frame, e) * sample_rate), x.size)
        loud = np.flatnonzero(np.abs(x[lo:hi]) >= amp) if hi > lo else np.zeros(0, np.int64)
        start = (lo + int(loud[0])) / sample_rate if loud.size else s
        lo = max(round(max(e - frame, s) * sample_rate), 0)
        hi = min(round(min(e + frame, nxt) * sample_rate), x.size)
        loud = np.flatnonzero(np.abs(x[lo:hi]) >= amp) if hi > lo else np.zeros(0, np.int64)
        end = (lo + int(loud[-1]) + 1) / sample_rate if loud.size else e
        out.append((start, max(end, start)))
    return out
