"""A stateful streaming resampler for PCM16 (soxr), for dialects whose wire rate differs.

Resampling chunk by chunk without state puts a filter transient at every chunk edge; one
`soxr.ResampleStream` per direction carries the filter state across chunks, so a stream cut
into 20 ms frames comes out the same as the whole signal resampled at once (minus the filter
delay, which soxr holds back until `flush`).
"""

from __future__ import annotations

import numpy as np
import soxr

from rig.audio.pcm import Pcm16


class ResampleStream:
    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ") -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"bad rates {in_rate} -> {out_rate}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.quality = quality
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16", quality=quality)
        )

    def process(self, pcm: Pcm16, last: bool = False) -> Pcm16:
        if self._stream is None:
            return pcm
        out = self._stream.resample_chunk(np.ascontiguousarray(pcm, dtype=np.int16), last=last)
        return np.asarray(out, dtype=np.int16).reshape(-1)

    @property
    def delay_ms(self) -> float:
        """Audio the filter currently holds back (output-side ms): a constant uplink delay."""
        if self._stream is None:
            return 0.0
        return float(self._stream.delay()) * 1000 / self.out_rate

    def flush(self) -> Pcm16:
        return self.process(np.zeros(0, dtype=np.int16), last=True)
