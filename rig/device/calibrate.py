"""Loopback calibration, the signal part: probes, delay estimation, repeat statistics.

How this works. A probe with a sharp autocorrelation (a logarithmic sine sweep, or a
maximum-length sequence) is played N times with silent gaps through the loopback. For
each repeat the recording is searched, inside a window where that repeat can be, by
FFT cross-correlation with the probe. The integer peak is refined to a fraction of a
sample by upsampling the correlation around it (band-limited interpolation) and fitting a
parabola on the fine grid. A repeat is accepted only if its peak stands well clear of the
rest of the correlation (`peak_ratio`): a missing probe must not turn into a number.

Both FFT steps are plain numpy (`correlate_valid`, `fft_resample`): the arithmetic of
scipy.signal's `correlate(..., "valid", method="fft")` and `resample` (the tests compare
them), so calibration needs no scipy. soxr is not used for the upsampling: its filters are
made for streams, and on a 33-sample segment their edge transients would move the peak.

`summarize` turns the per-repeat round trips into mean, median, spread and standard
deviation, and refuses (CalibrationRefused) when the repeats disagree by more than the
allowed spread: a loopback whose delay moves between repeats (drifting clocks, a stream
that drops audio) cannot be subtracted from anything. No clocks, no I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rig.audio.fftlen import fast_len
from rig.errors import DeviceError

Float64 = npt.NDArray[np.float64]

#: feedback taps (1-based) of a maximal-length Fibonacci LFSR, by register length
MLS_TAPS: dict[int, tuple[int, ...]] = {
    8: (8, 6, 5, 4),
    9: (9, 5),
    10: (10, 7),
    11: (11, 9),
    12: (12, 11, 10, 4),
    13: (13, 12, 11, 8),
    14: (14, 13, 12, 2),
    15: (15, 14),
    16: (16, 15, 13, 4),
    17: (17, 14),
    18: (18, 11),
}


class CalibrationRefused(DeviceError):
    """The repeats disagree (or too few were found): no calibration is better than a wrong one."""

    def __init__(self, reason: str, round_trips_ms: Sequence[float]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.round_trips_ms = list(round_trips_ms)


def log_chirp(
    rate: int,
    duration_s: float = 0.25,
    f0_hz: float = 100.0,
    f1_hz: float | None = None,
    fade_s: float = 0.005,
    amplitude: float = 0.5,
) -> Float64:
    """Exponential sine sweep from f0 to f1 (default 0.4 * rate), with raised-cosine fades."""
    f1 = f1_hz if f1_hz is not None else 0.4 * rate
    if not 0 < f0_hz < f1 < rate / 2:
        raise ValueError(f"need 0 < f0 < f1 < rate/2, got f0={f0_hz} f1={f1} rate={rate}")
    n = int(round(duration_s * rate))
    if n < 16:
        raise ValueError("chirp too short")
    t = np.arange(n) / rate
    k = math.log(f1 / f0_hz)
    phase = 2 * math.pi * f0_hz * duration_s / k * (np.exp(t * k / duration_s) - 1.0)
    x = amplitude * np.sin(phase)
    n_fade = min(int(fade_s * rate), n // 4)
    if n_fade > 0:
        ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(n_fade) / n_fade)
        x[:n_fade] *= ramp
        x[-n_fade:] *= ramp[::-1]
    return np.asarray(x, dtype=np.float64)


def mls(order: int, amplitude: float = 0.5) -> Float64:
    """Maximum-length sequence of 2**order - 1 samples, values +-amplitude."""
    taps = MLS_TAPS.get(order)
    if taps is None:
        raise ValueError(f"MLS order must be one of {sorted(MLS_TAPS)}, got {order}")
    n = (1 << order) - 1
    state = [1] * order
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        bit = state[-1]
        out[i] = amplitude if bit else -amplitude
        feedback = 0
        for tap in taps:
            feedback ^= state[tap - 1]
        state = [feedback, *state[:-1]]
    return out


def probe_train(probe: Float64, repeats: int, gap_frames: int) -> tuple[Float64, list[int]]:
    """`repeats` copies of the probe, each followed by `gap_frames` of silence.

    Returns the train and each copy's start frame within it.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if gap_frames < 0:
        raise ValueError("gap_frames must be >= 0")
    period = len(probe) + gap_frames
    train = np.zeros(period * repeats, dtype=np.float64)
    starts = [r * period for r in range(repeats)]
    for s in starts:
        train[s : s + len(probe)] = probe
    return train, starts


def correlate_valid(x: Float64, y: Float64) -> Float64:
    """Cross-correlation c[k] = sum_n x[n + k] * y[n] for every lag where y lies wholly
    inside x (len(x) - len(y) + 1 lags), by FFT: what scipy's `correlate(x, y, "valid")` gives."""
    if len(y) > len(x) or len(y) == 0:
        raise ValueError("y must be non-empty and no longer than x")
    n_full = len(x) + len(y) - 1
    n_fft = fast_len(n_full)
    spec = np.fft.rfft(x, n_fft) * np.fft.rfft(y[::-1], n_fft)
    full = np.fft.irfft(spec, n_fft)[:n_full]
    return np.asarray(full[len(y) - 1 : len(x)], dtype=np.float64)


def fft_resample(x: Float64, num: int) -> Float64:
    """`x` (taken as one period of a band-limited signal) at `num` evenly spaced points:
    zero-padding its spectrum, with the Nyquist bin split in two when upsampling an even
    length; the same as scipy's `signal.resample` for real input."""
    n = len(x)
    spec = np.fft.rfft(x)
    out = np.zeros(num // 2 + 1, dtype=np.complex128)
    m = min(n, num)
    out[: m // 2 + 1] = spec[: m // 2 + 1]
    if m % 2 == 0:
        if num < n:  # downsampling: the new Nyquist bin takes both halves
            out[m // 2] *= 2.0
        elif n < num:  # upsampling: the old Nyquist bin is shared by +f and -f
            out[m // 2] *= 0.5
    return np.asarray(np.fft.irfft(out, num) * (num / n), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class Detection:
    """Where a probe starts in a recording, in (fractional) frames of that recording."""

    position_frames: float
    #: correlation peak over the next largest value away from the peak (>= 1)
    peak_ratio: float


_HALF_WIDTH = 16


def _refine(corr: Float64, peak: int, half_width: int = _HALF_WIDTH, factor: int = 32) -> float:
    """Sub-sample peak: FFT-upsample the correlation around `peak`, parabola on the fine grid."""
    lo = max(0, peak - half_width)
    hi = min(len(corr), peak + half_width + 1)
    seg = corr[lo:hi]
    if len(seg) < 3:
        return float(peak)
    # remove the linear trend so the periodic extension in fft_resample() has no step
    x = np.arange(len(seg) * factor) / factor
    ramp_at = seg[0] + (seg[-1] - seg[0]) * x / (len(seg) - 1)
    ramp = seg[0] + (seg[-1] - seg[0]) * np.arange(len(seg)) / (len(seg) - 1)
    fine = fft_resample(seg - ramp, len(seg) * factor) + ramp_at
    centre = (peak - lo) * factor
    window = slice(max(0, centre - factor), min(len(fine), centre + factor + 1))
    i = int(np.argmax(fine[window])) + window.start
    if 0 < i < len(fine) - 1:
        y0, y1, y2 = fine[i - 1], fine[i], fine[i + 1]
        denom = y0 - 2 * y1 + y2
        delta = 0.5 * (y0 - y2) / denom if denom != 0 else 0.0
    else:
        delta = 0.0
    return lo + (i + delta) / factor


def find_probe(
    probe: Float64,
    recording: npt.NDArray[np.floating] | npt.NDArray[np.integer],
    start: int = 0,
    stop: int | None = None,
    min_peak_ratio: float = 3.0,
) -> Detection | None:
    """Find the probe's start in `recording[start:stop]` (frame numbers are of `recording`).

    Returns None when the recording is too short or no peak stands out by `min_peak_ratio`.
    """
    rec = np.asarray(recording, dtype=np.float64)
    stop = len(rec) if stop is None else min(stop, len(rec))
    start = max(0, start)
    seg = rec[start:stop]
    if len(seg) < len(probe):
        return None
    # zero context on both sides so the sub-sample refinement has a full window at the edges
    pad = 2 * _HALF_WIDTH
    corr = correlate_valid(np.pad(seg, pad), probe)
    lags = slice(pad, pad + len(seg) - len(probe) + 1)  # probe wholly inside the window
    mag = np.abs(corr[lags])
    peak = int(np.argmax(mag))
    if mag[peak] <= 0:
        return None
    # the next largest value at least one autocorrelation width away from the peak
    guard = max(8, len(probe) // 64)
    away = np.concatenate([mag[: max(0, peak - guard)], mag[peak + guard + 1 :]])
    runner_up = float(away.max()) if len(away) else 0.0
    ratio = float(mag[peak] / runner_up) if runner_up > 0 else math.inf
    if ratio < min_peak_ratio:
        return None
    sign = 1.0 if corr[pad + peak] >= 0 else -1.0
    pos = _refine(sign * corr, pad + peak) - pad
    return Detection(position_frames=float(start + pos), peak_ratio=ratio)


@dataclass(frozen=True, slots=True)
class CalibrationStats:
    """Round-trip statistics over the repeats, in milliseconds."""

    round_trips_ms: tuple[float, ...]
    mean_ms: float
    median_ms: float
    spread_ms: float
    std_ms: float

    @property
    def repeats(self) -> int:
        return len(self.round_trips_ms)


def summarize(
    round_trips_ms: Sequence[float],
    *,
    max_spread_ms: float = 1.0,
    min_repeats: int = 3,
    expected_repeats: int | None = None,
) -> CalibrationStats:
    """Statistics over the repeats; raise CalibrationRefused if they are too few or disagree.

    spread_ms is max - min, the honest worst case with the few repeats a calibration has.
    """
    values = [float(v) for v in round_trips_ms]
    if any(not math.isfinite(v) for v in values):
        raise CalibrationRefused("a repeat has no finite round trip", values)
    if len(values) < min_repeats:
        found = f"{len(values)} of {expected_repeats}" if expected_repeats else str(len(values))
        raise CalibrationRefused(
            f"found the probe in only {found} repeats (need {min_repeats}): is the loopback "
            "connected and the level high enough?",
            values,
        )
    arr = np.array(values)
    spread = float(arr.max() - arr.min())
    stats = CalibrationStats(
        round_trips_ms=tuple(values),
        mean_ms=float(arr.mean()),
        median_ms=float(np.median(arr)),
        spread_ms=spread,
        std_ms=float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
    )
    if spread > max_spread_ms:
        raise CalibrationRefused(
            f"repeats disagree: spread {spread:.3f} ms > {max_spread_ms} ms "
            f"(round trips {', '.join(f'{v:.3f}' for v in values)} ms)",
            values,
        )
    if expected_repeats is not None and len(values) < expected_repeats:
        missing = expected_repeats - len(values)
        raise CalibrationRefused(
            f"{missing} of {expected_repeats} repeats were not found in the recording", values
        )
    return stats
