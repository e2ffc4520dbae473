"""PCM helpers: int16 <-> float, levels. Pure functions."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

Pcm16 = npt.NDArray[np.int16]
Float32 = npt.NDArray[np.float32]

SILENCE_DBFS = -120.0


def to_float(pcm: Pcm16) -> Float32:
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)


def to_int16(x: npt.NDArray[np.floating]) -> Pcm16:
    y = np.clip(np.rint(np.asarray(x, dtype=np.float64) * 32768.0), -32768, 32767)
    return y.astype(np.int16)


#: numpy keeps the GIL for element loops of up to 500 elements and drops it for longer ones
#: and for every BLAS dot product
GIL_HELD_MAX = 500


def sum_squares(pcm: Pcm16) -> float:
    """The exact sum of squares of `pcm`, in float64 (exact while under 2**53: up to 2**23
    full-scale samples; int64 beyond). A frame of up to `GIL_HELD_MAX` samples (20 ms at
    16-24 kHz) is squared by element loops that keep the GIL: the writer thread measures
    the level of every uplink frame it cannot look up (rig.recordings.levels), and a dot
    product per frame dropped and retook the GIL each time, a hand-off to the event loop
    thread and back (500-790 more voluntary switches of the loop thread per second at 200
    streams, 4 pairs; docs/pacing.md, twelfth pass on #32).
    Longer arrays take one dot product (a fifth of the CPU of square-and-sum)."""
    if pcm.size <= GIL_HELD_MAX:
        y = pcm.astype(np.float64)
        return float(np.add.reduce(y * y))
    x = pcm.astype(np.float64) if pcm.size <= 1 << 23 else pcm.astype(np.int64)
    return float(x.dot(x))


def level_dbfs(pcm: Pcm16) -> float:
    """RMS level relative to a full-scale sine's RMS... kept simple: RMS re full scale."""
    if pcm.size == 0:
        return SILENCE_DBFS
    return level_of(sum_squares(pcm), pcm.size)


def level_of(sum_sq: float, n: int) -> float:
    """`level_dbfs` of `n` samples whose squares sum to `sum_sq` (exact: the same float
    whether the sum came from `sum_squares` or from int64 arithmetic)."""
    rms = math.sqrt(sum_sq / n) / 32768.0
    if rms <= 1e-6:
        return SILENCE_DBFS
    return round(20.0 * math.log10(rms), 2)


def frame_levels(pcm: Pcm16, n: int, phase: int = 0) -> list[float]:
    """`level_dbfs` of every whole `n`-sample frame of `pcm` from sample `phase` on, in one
    pass: frame k is `pcm[phase + k*n : phase + (k+1)*n]`. The same floats as `level_dbfs`
    frame by frame (exact int64 sums, `level_of`), so records do not depend on which path
    measured them."""
    k = (len(pcm) - phase) // n if 0 <= phase < len(pcm) else 0
    if k <= 0:
        return []
    x = pcm[phase : phase + k * n].astype(np.int64).reshape(k, n)
    sums = np.einsum("ij,ij->i", x, x)
    return [level_of(float(s), n) for s in sums.tolist()]


def pcm_from_bytes(data: bytes) -> Pcm16:
    if len(data) % 2:
        raise ValueError(f"PCM16 payload has an odd number of bytes ({len(data)})")
    return np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)
