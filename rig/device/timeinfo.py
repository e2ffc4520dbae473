"""Stream time: where a stream's frames sit on the shared clock, and whether PortAudio agrees.

How this works. Every PortAudio callback is stamped on the shared monotonic clock when it
starts (`t_ns`) and carries the stream frame index of its first sample. By convention a
block's first sample is placed at the callback stamp and the following samples follow at
the nominal rate, the same convention the device transport uses when it stamps chunks.
Stamps jitter (scheduling) and a stream can stall at start-up (the ALSA "pulse" plugin
pre-fills, then pauses ~1.5 s), so `FrameClock` maps a frame to time with the *median* of
`t_ns - frame / rate` over the blocks near that frame, not with one stamp or a global fit.

PortAudio also reports its own times (inputBufferAdcTime, outputBufferDacTime,
currentTime) on the stream's clock. On JACK that clock starts near zero when the stream
opens; through ALSA/PulseAudio it is the wall clock, and the ADC time can lag the current
time by hundreds of milliseconds. `check_pa_clock` fits those times against the monotonic
stamps and calls them consistent only if they run at the same rate (slope near 1) with a
stable offset (small residuals).

While a stream runs, `LiveClock` places frames causally (the lower envelope of recent
stamp offsets: callbacks run late, never early), and `PlayLog` says which output stream
frame each queued sample played at. Nothing here reads a clock: stamps come in as data.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rig.core.units import NS_PER_S


@dataclass(frozen=True, slots=True)
class FrameStamp:
    """One callback of one direction: where its first frame is on the shared clock."""

    frame: int
    n_frames: int
    t_ns: int
    #: PortAudio's ADC (input) or DAC (output) time for this block, seconds, stream clock
    pa_time_s: float | None = None
    #: PortAudio's currentTime at the callback, seconds, stream clock
    pa_current_s: float | None = None


class FrameClock:
    """Maps stream frames to shared-clock nanoseconds (and back) from callback stamps."""

    def __init__(
        self, stamps: Sequence[FrameStamp], rate: int, window_frames: int | None = None
    ) -> None:
        if not stamps:
            raise ValueError("FrameClock needs at least one stamp")
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.window_frames = window_frames if window_frames is not None else rate // 4
        self._frames = np.array([s.frame for s in stamps], dtype=np.float64)
        self._t_ns = np.array([s.t_ns for s in stamps], dtype=np.float64)
        ns_per_frame = NS_PER_S / rate
        self._offsets_ns = np.array(
            [s.t_ns - s.frame * ns_per_frame for s in stamps], dtype=np.float64
        )

    def offset_ns(self, frame: float) -> float:
        """Median of `t_ns - frame/rate` over blocks within the window around `frame`."""
        near = np.abs(self._frames - frame) <= self.window_frames
        if not near.any():
            near = np.abs(self._frames - frame) <= np.abs(self._frames - frame).min()
        return float(np.median(self._offsets_ns[near]))

    def spread_ns(self, frame: float) -> float:
        """Interquartile range of the offsets near `frame`: how much the stamps jitter."""
        near = np.abs(self._frames - frame) <= self.window_frames
        if near.sum() < 2:
            return 0.0
        q1, q3 = np.percentile(self._offsets_ns[near], [25, 75])
        return float(q3 - q1)

    def time_ns(self, frame: float) -> float:
        return self.offset_ns(frame) + frame * NS_PER_S / self.rate

    def frame_at(self, t_ns: float) -> float:
        """The frame placed at `t_ns`, using the offsets of the blocks stamped nearest to it."""
        near_frame = float(self._frames[int(np.argmin(np.abs(self._t_ns - t_ns)))])
        return (t_ns - self.offset_ns(near_frame)) * self.rate / NS_PER_S


def cycle_skew_ns(
    in_stamps: Sequence[FrameStamp], out_stamps: Sequence[FrameStamp], rate: int
) -> float | None:
    """Median of (input stamp - output stamp) over blocks of one callback cycle, or None when
    the two streams do not share cycles (or there is too little to tell).

    On JACK, PortAudio serves every stream of a process from one JACK process callback, so an
    input and an output block of the same cycle hold the same instant; but each is stamped
    as its own Python callback starts, one after the other (the first callback's run and a
    GIL hand-off in between: 20-63 us on the JACK room, 1-3 samples at 48 kHz, and different
    at every open). Setting one stream's frames against the other's on the shared clock
    carries that skew; with it known, it can be taken out.
    """
    if len(in_stamps) < 8 or len(out_stamps) < 8:
        return None
    t_in = np.array([s.t_ns for s in in_stamps], dtype=np.float64)
    t_out = np.array([s.t_ns for s in out_stamps], dtype=np.float64)
    i = np.clip(np.searchsorted(t_out, t_in), 1, t_out.size - 1)
    i -= (np.abs(t_in - t_out[i - 1]) < np.abs(t_in - t_out[i])).astype(i.dtype)
    d = t_in - t_out[i]
    block_ns = min(s.n_frames for s in in_stamps) * NS_PER_S / rate
    paired = np.abs(d) < block_ns / 4
    if paired.mean() < 0.9:  # not one cycle: two clocks, or stamps too scattered to pair
        return None
    return float(np.median(d[paired]))


@dataclass(frozen=True, slots=True)
class PaClockCheck:
    """Whether PortAudio's stream times can be mapped onto the shared clock."""

    consistent: bool
    reason: str
    n: int
    #: d(pa time) / d(shared time); 1.0 for a clock at the same rate
    slope: float
    #: shared-clock ns = pa_time_s * 1e9 + offset_ns (median, when consistent)
    offset_ns: float
    #: 95th percentile of |residual| after removing the median offset, ms
    residual_ms: float
    #: median of (pa_current - pa_time): PortAudio's own idea of this direction's latency
    pa_latency_ms: float | None

    def to_shared_ns(self, pa_time_s: float) -> int:
        if not self.consistent:
            raise ValueError(f"PortAudio times are not consistent: {self.reason}")
        return round(pa_time_s * NS_PER_S + self.offset_ns)

    def as_dict(self) -> dict[str, object]:
        return {
            "consistent": self.consistent,
            "reason": self.reason,
            "n": self.n,
            "slope": self.slope,
            "offset_ns": self.offset_ns,
            "residual_ms": self.residual_ms,
            "pa_latency_ms": self.pa_latency_ms,
        }


def check_pa_clock(
    stamps: Sequence[FrameStamp],
    *,
    max_slope_error: float = 1e-3,
    max_residual_ms: float = 5.0,
    min_stamps: int = 20,
) -> PaClockCheck:
    """Check PortAudio's per-block times against the monotonic stamps before trusting them.

    Consistent means: enough blocks, every PortAudio time finite and strictly advancing, a
    least-squares slope within `max_slope_error` of 1, and residuals around the median
    offset under `max_residual_ms` (95th percentile). The threshold must exceed callback
    jitter, which the stamps carry too.
    """
    usable = [s for s in stamps if s.pa_time_s is not None and math.isfinite(s.pa_time_s)]
    n = len(usable)
    latencies = [
        (s.pa_current_s - s.pa_time_s) * 1e3
        for s in usable
        if s.pa_current_s is not None and s.pa_time_s is not None
    ]
    pa_latency_ms = abs(float(np.median(latencies))) if latencies else None

    def verdict(
        ok: bool,
        reason: str,
        slope: float = math.nan,
        offset: float = math.nan,
        resid: float = math.nan,
    ) -> PaClockCheck:
        return PaClockCheck(ok, reason, n, slope, offset, resid, pa_latency_ms)

    if n < min_stamps:
        return verdict(False, f"only {n} blocks carry a PortAudio time (need {min_stamps})")
    pa = np.array([s.pa_time_s for s in usable], dtype=np.float64)
    t = np.array([s.t_ns for s in usable], dtype=np.float64)
    if np.any(np.diff(pa) <= 0):
        stuck = int(np.sum(np.diff(pa) <= 0))
        return verdict(False, f"PortAudio time does not advance on {stuck} of {n - 1} blocks")
    t_s = (t - t[0]) / NS_PER_S
    pa_rel = pa - pa[0]
    if t_s[-1] <= 0:
        return verdict(False, "stamps span no time")
    slope = float(np.polyfit(t_s, pa_rel, 1)[0])
    offsets = t - pa * NS_PER_S
    offset = float(np.median(offsets))
    resid_ms = float(np.percentile(np.abs(offsets - offset), 95) / 1e6)
    if abs(slope - 1.0) > max_slope_error:
        return verdict(
            False,
            f"rate differs from the shared clock (slope {slope:.6f})",
            slope,
            offset,
            resid_ms,
        )
    if resid_ms > max_residual_ms:
        return verdict(
            False,
            f"offset not stable ({resid_ms:.2f} ms p95 > {max_residual_ms})",
            slope,
            offset,
            resid_ms,
        )
    return verdict(True, "same rate, stable offset", slope, offset, resid_ms)


# ---------------------------------------------------------------------------- live trackers

LIVE_WINDOW_S = 0.5
MAX_SETTLE_SPREAD_NS = 20_000_000


class LiveClock:
    """Causal placement of one direction's frames: lower envelope of recent stamp offsets."""

    def __init__(self, rate: int, window_s: float = LIVE_WINDOW_S) -> None:
        self.rate = rate
        self.window_frames = round(window_s * rate)
        self._recent: collections.deque[tuple[int, float]] = collections.deque()

    def add(self, frame: int, t_ns: int) -> None:
        self._recent.append((frame, t_ns - frame * NS_PER_S / self.rate))
        while self._recent and self._recent[0][0] < frame - self.window_frames:
            self._recent.popleft()

    def time_ns(self, frame: float) -> int:
        if not self._recent:
            raise ValueError("no stamps yet")
        return round(min(o for _, o in self._recent) + frame * NS_PER_S / self.rate)

    def steady(self) -> bool:
        """The window is full of blocks that agree: the stream runs at its rate, no stall."""
        if len(self._recent) < 3:
            return False
        span = self._recent[-1][0] - self._recent[0][0]
        offsets = [o for _, o in self._recent]
        return span >= self.window_frames * 0.9 and max(offsets) - min(offsets) < (
            MAX_SETTLE_SPREAD_NS
        )


class PlayLog:
    """Which output stream frame each queued sample played at (fed from output blocks)."""

    def __init__(self) -> None:
        self.pushed = 0  # samples queued so far (lead silence included)
        self.played = 0  # samples the output blocks seen so far took from the queue
        self.next_out_frame = 0  # stream frame after the last output block seen
        self._starts: list[int] = []  # cumulative queue index of each block's first taken sample
        self._frames: list[int] = []  # that sample's output stream frame

    @property
    def empty(self) -> bool:
        return self.played >= self.pushed

    def push(self, n: int) -> int:
        start = self.pushed
        self.pushed += n
        return start

    def on_block(self, frame: int, n_frames: int, taken: int) -> None:
        if taken > 0:
            self._starts.append(self.played)
            self._frames.append(frame)
            self.played += taken
        self.next_out_frame = frame + n_frames

    def frame_of(self, index: int) -> int | None:
        """Output stream frame of queued sample `index`, once an output block took it."""
        if index >= self.played or not self._starts:
            return None
        i = bisect.bisect_right(self._starts, index) - 1
        return self._frames[i] + index - self._starts[i]

    def predict_frame(self, index: int) -> int:
        """Where `index` will play if the queue drains without a gap from now on."""
        return self.next_out_frame + max(0, index - self.played)
