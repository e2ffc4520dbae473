"""System speech onsets on the playback timeline, found chunk by chunk (sans-I/O).

An energy gate on 5 ms blocks: a loud block that follows at least `gap_ms` of quiet (on the
playback timeline) starts a new segment. Because positions are playback sample indices, a
system that sends its reply faster than real time still gets the onset where it is heard.
"""

from __future__ import annotations

import numpy as np

from rig.audio.pcm import Pcm16

BLOCK_MS = 5


class OnsetDetector:
    def __init__(
        self, sample_rate: int, threshold_dbfs: float = -40.0, gap_ms: float = 300.0
    ) -> None:
        self.sample_rate = sample_rate
        self.threshold = 32768.0 * 10 ** (threshold_dbfs / 20)
        # |x| > threshold for an integer sample x is x > k or x < -k with k = floor(threshold):
        # two int16 comparisons, no int32 copy and abs per chunk (k capped where no int16
        # sample can pass: -k would not fit, and x > 32767 is never true)
        self._k = min(int(np.floor(self.threshold)), 32767)
        self._never = self.threshold >= 32768.0
        self.block = max(1, sample_rate * BLOCK_MS // 1000)
        self.gap_samples = round(gap_ms / 1000 * sample_rate)
        self._last_loud_end: int | None = None

    @property
    def last_loud_end_sample(self) -> int | None:
        """End (exclusive) of the latest loud sample on the playback timeline."""
        return self._last_loud_end

    def feed(self, pcm: Pcm16, start_sample: int) -> int | None:
        """Offset (samples into `pcm`) of a new segment's onset in this chunk, if any."""
        if pcm.size == 0:
            return None
        if self._never:
            return None
        k = self._k
        loud = np.flatnonzero((pcm > k) | (pcm < -k))
        if loud.size == 0:
            return None
        onset: int | None = None
        first = int(loud[0])
        if (
            self._last_loud_end is None
            or start_sample + first - self._last_loud_end >= self.gap_samples
        ):
            onset = first
        elif int(loud[-1]) - first >= self.gap_samples:
            # a quiet stretch inside this chunk can also start a new segment (only a chunk
            # whose loud samples span more than a gap can hold one: not a 20 ms chunk)
            gaps = np.flatnonzero(np.diff(loud) >= self.gap_samples)
            if gaps.size:
                onset = int(loud[gaps[0] + 1])
        self._last_loud_end = start_sample + int(loud[-1]) + 1
        return onset
