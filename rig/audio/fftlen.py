"""FFT lengths numpy's pocketfft does quickly: shared by the device calibration's
correlation and the reference system's lag search."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=256)
def fast_len(n: int) -> int:
    """The smallest 5-smooth number >= n (2^a 3^b 5^c): a length numpy's FFT does quickly
    (the next power of two can take twice as long)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best
