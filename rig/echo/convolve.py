"""Streaming convolution with a long impulse response, one block per uplink frame.

How this works: uniformly partitioned overlap-save (UPOLS). The response h is cut into P
blocks of B samples (B = the frame), each transformed once (FFT of 2B). Per block of input,
one FFT of [previous block, this block] goes into a frequency-domain delay line of the last P
spectra; the output spectrum is the sum over p of spectrum[k - p] * H[p], and the last B
samples of its inverse FFT are exactly the next B samples of the linear convolution (the first
B are the circular wrap, discarded). Cost per block: one real FFT and one inverse of 2B points
plus P * (B + 1) complex multiply-adds, with no look-ahead and no latency beyond the block:
for a 0.3 s room at 16 kHz and 20 ms frames, P = 15 (bench/echo_convolve.py measures it).
scipy.signal.oaconvolve is not incremental; this keeps its state between calls.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


class PartitionedConvolver:
    """`process(x)` with len(x) == block: the next `block` samples of conv(input, h)."""

    def __init__(self, h: npt.ArrayLike, block: int) -> None:
        taps = np.asarray(h, dtype=np.float64).ravel()
        if taps.size == 0 or block <= 0:
            raise ValueError("need a non-empty response and a positive block")
        self.block = block
        self.n_parts = -(-taps.size // block)
        padded = np.zeros(self.n_parts * block)
        padded[: taps.size] = taps
        parts = padded.reshape(self.n_parts, block)
        self._h = np.fft.rfft(parts, n=2 * block, axis=1)  # (P, B + 1)
        self._fdl = np.zeros_like(self._h)
        self._k = 0  # the delay line's newest slot
        self._order = np.arange(self.n_parts)
        self._prev = np.zeros(block)

    def process(self, x: npt.ArrayLike) -> F64:
        x = np.asarray(x, dtype=np.float64)
        if x.size != self.block:
            raise ValueError(f"block of {self.block} samples expected, got {x.size}")
        self._k = (self._k + 1) % self.n_parts
        self._fdl[self._k] = np.fft.rfft(np.concatenate((self._prev, x)))
        self._prev = x.copy()
        # spectrum k - p meets H[p]: the delay line read newest first
        idx = (self._k - self._order) % self.n_parts
        y = np.einsum("pk,pk->k", self._fdl[idx], self._h)
        return np.fft.irfft(y, n=2 * self.block)[self.block :]

    def reset(self) -> None:
        self._fdl[:] = 0
        self._prev[:] = 0
