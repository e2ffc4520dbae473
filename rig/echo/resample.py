"""The playback track, kept at the system's rate and read at the uplink's.

How this works: `PlayedTrack` is a ring buffer of what the listener has played (its
`SystemAudio` records, truncation included: audio dropped at a barge-in is never played, so
never here), indexed by sample on the session timeline at the downlink rate; a gap between
records is silence. `read(a, b, rate)` returns uplink-rate samples a..b by windowed-sinc
interpolation at the exact positions a * down / rate (Kaiser window, `TAPS` taps each side,
cut-off at the lower rate's Nyquist): stateless, so any span can be read, and exact on the
sample grid (equal rates: a plain copy). It needs `TAPS` samples beyond the span (the look-
ahead rig.echo.spec's minimum delay covers). Positions not played read as silence.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16

F64 = npt.NDArray[np.float64]
TAPS = 16
_BETA = 8.0


class PlayedTrack:
    def __init__(self, sample_rate: int, keep_s: float) -> None:
        self.sample_rate = sample_rate
        self._ring = np.zeros(max(1024, int(keep_s * sample_rate)), dtype=np.float64)
        self.end = 0  # one past the last played sample

    def write(self, start: int, pcm: Pcm16) -> None:
        """Played audio at `start` (session-timeline samples, downlink rate)."""
        n = self._ring.size
        if start > self.end:  # silence between: clear what the ring held there
            gap = min(start - self.end, n)
            self._put(start - gap, np.zeros(gap))
        x = pcm.astype(np.float64) / 32768.0
        if start < self.end:  # the writer's rounding overlap: keep what is there
            x = x[self.end - start :]
            start = self.end
        if x.size:
            self._put(start, x[-n:] if x.size > n else x)
            self.end = start + x.size

    def _put(self, start: int, x: F64) -> None:
        n = self._ring.size
        i = start % n
        first = min(x.size, n - i)
        self._ring[i : i + first] = x[:first]
        self._ring[: x.size - first] = x[first:]

    def span(self, a: int, b: int) -> F64:
        """Downlink samples a..b (silence outside what was played and kept)."""
        out = np.zeros(max(0, b - a))
        lo, hi = max(a, self.end - self._ring.size, 0), min(b, self.end)
        if hi > lo:
            idx = np.arange(lo, hi) % self._ring.size
            out[lo - a : hi - a] = self._ring[idx]
        return out

    def read(self, a: int, b: int, rate: int) -> F64:
        """Uplink-rate samples a..b of the played track (positions a*down/rate, ...)."""
        down = self.sample_rate
        if rate == down or b <= a:
            return self.span(a, b)
        p, q = _ratio(rate, down)
        j = np.arange(a, b, dtype=np.int64)
        base = (j * q) // p  # output j sits at input j * q / p = base + phase / p
        phase = (j * q) % p
        lo, hi = int(base[0]) - TAPS + 1, int(base[-1]) + TAPS + 1
        x = self.span(lo, hi)
        k = np.arange(-TAPS + 1, TAPS + 1)
        taps = x[(base - lo)[:, None] + k[None, :]]
        return np.asarray(np.einsum("ij,ij->i", taps, _kernels(p, q)[phase]), dtype=np.float64)


def _ratio(up: int, down: int) -> tuple[int, int]:
    g = math.gcd(up, down)
    return up // g, down // g


@functools.lru_cache(maxsize=16)
def _kernels(p: int, q: int) -> F64:
    """Windowed-sinc taps for each of the p fractional phases of a p/q rate change."""
    frac = np.arange(p) / p
    k = np.arange(-TAPS + 1, TAPS + 1)
    d = k[None, :] - frac[:, None]  # distance of each tap from the wanted position
    fc = min(1.0, p / q)
    r = np.clip(d / (TAPS + 1), -1.0, 1.0)
    win = np.i0(_BETA * np.sqrt(1.0 - r * r)) / np.i0(_BETA)
    return np.asarray(fc * np.sinc(fc * d) * win, dtype=np.float64)


def lookahead_samples(down_rate: int, up_rate: int) -> int:
    """Downlink samples `read` needs beyond its span."""
    return 0 if down_rate == up_rate else TAPS
