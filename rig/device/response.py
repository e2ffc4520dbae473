"""The impulse response of the rig's own playback -> capture path, measured by `rig calibrate`.

Why: a microphone that hears the device under test hears the rig's own loudspeaker too. To
remove that echo (rig.echo.livecancel) the canceller needs to know where the echo starts (the
bulk delay: output and input buffering, cable or air) and how long it rings (the room); the
calibration already plays a known probe through exactly that path, so it keeps the response.

How this works (pure numpy, no clock, no I/O): every repeat the calibration found gives a
segment of the recording starting `pre` samples before the probe's detected start; the
segments are averaged (the repeats are sample-aligned to the nearest frame), and the response
is the regularised spectral division of that average by the probe (Wiener style: the probe's
band, 100 Hz to 0.4 x rate for the chirp, is where it is known; outside, the division is held
down by `eps`). Tap 0 sits `pre` samples before the detected direct path, so on the shared
clock it is at `round_trip_ms - pre_ms` after the playback (`t0_ms`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
#: taps kept before the direct path (the canceller's margin for the bulk delay)
PRE_MS = 2.0
#: response length kept after tap 0 (must fit in the calibration's silent gap)
LENGTH_MS = 100.0


@dataclass(frozen=True, slots=True)
class ImpulseResponse:
    """h[k] at `t0_ms + k / rate` after the playback, on the shared clock."""

    rate: int
    t0_ms: float
    taps: tuple[float, ...]

    @property
    def array(self) -> F64:
        return np.asarray(self.taps, dtype=np.float64)

    @property
    def gain_db(self) -> float:
        """The path's power gain (its energy): -ERL of the rig's own echo."""
        e = float(self.array @ self.array)
        return 10.0 * math.log10(e) if e > 0 else -math.inf

    @property
    def peak_ms(self) -> float:
        """Where the response peaks, after the playback."""
        return self.t0_ms + int(np.argmax(np.abs(self.array))) * 1000.0 / self.rate

    def length_ms(self, fraction: float = 0.999) -> float:
        """Time from tap 0 until `fraction` of the energy is in."""
        e = np.cumsum(self.array**2)
        if e[-1] <= 0:
            return 0.0
        return (int(np.searchsorted(e, fraction * e[-1])) + 1) * 1000.0 / self.rate

    def as_dict(self) -> dict[str, Any]:
        a = self.array
        return {
            "rate": self.rate,
            "t0_ms": round(self.t0_ms, 4),
            "peak_ms": round(self.peak_ms, 4),
            "peak": round(float(a[int(np.argmax(np.abs(a)))]), 6),
            "gain_db": round(self.gain_db, 3),
            "length_ms": round(self.length_ms(), 3),
            "taps": [round(float(v), 6) for v in a],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImpulseResponse:
        taps = tuple(float(v) for v in d["taps"])
        if not taps or not all(math.isfinite(v) for v in taps):
            raise ValueError("impulse response taps must be finite numbers")
        return cls(rate=int(d["rate"]), t0_ms=float(d["t0_ms"]), taps=taps)


def measure_response(
    probe: F64,
    recording: F64,
    positions: Sequence[float],
    rate: int,
    round_trip_ms: float,
    *,
    pre_ms: float = PRE_MS,
    length_ms: float = LENGTH_MS,
    eps: float = 1e-5,
) -> ImpulseResponse | None:
    """The path's response from the repeats found at `positions` (recording frames)."""
    pre = round(pre_ms * rate / 1000)
    n_taps = pre + round(length_ms * rate / 1000)
    seg_len = len(probe) + n_taps
    segs = []
    for p in positions:
        a = int(round(p)) - pre
        if a >= 0 and a + seg_len <= len(recording):
            segs.append(recording[a : a + seg_len])
    if not segs:
        return None
    avg = np.mean(segs, axis=0)
    n_fft = 1 << (seg_len + len(probe)).bit_length()
    spec_p = np.fft.rfft(probe, n_fft)
    power = np.abs(spec_p) ** 2
    h = np.fft.irfft(np.fft.rfft(avg, n_fft) * np.conj(spec_p) / (power + eps * power.max()))
    taps = np.asarray(h[:n_taps], dtype=np.float64)
    return ImpulseResponse(rate, round_trip_ms - pre * 1000.0 / rate, tuple(taps.tolist()))
