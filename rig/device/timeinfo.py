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
stable offset (small residuals). Nothing here reads a clock: stamps come in as data.
"""

from __future__ import annotations

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
