"""The uplink send log: which shared-clock time each uplink sample left the rig (sans-I/O).

Hosted APIs report positions in the audio they received (`audio_start_ms` = milliseconds
into the input buffer). The dialect records (first sample, sample count, send time) for every
frame it encodes; a position in the audio stream then maps to the send time of the frame
that carried it plus its offset inside the frame. That puts server-side speech detection on
the shared clock without trusting any server clock.
"""

from __future__ import annotations

import bisect
import math

from rig.core.units import NS_PER_S


class SendLog:
    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.samples = 0
        self._starts: list[int] = []
        self._t_ns: list[int] = []

    def record(self, n_samples: int, t_ns: int) -> None:
        self._starts.append(self.samples)
        self._t_ns.append(t_ns)
        self.samples += n_samples

    def time_of_ms(self, audio_ms: float) -> int | None:
        """Shared-clock time the sample at `audio_ms` into the stream was sent (None if unsent)."""
        position = audio_ms * self.sample_rate / 1000
        if not math.isfinite(position):  # NaN, inf, or 1e308 ms times the rate
            return None
        sample = round(position)
        if not self._starts or sample < 0 or sample > self.samples:
            return None
        i = bisect.bisect_right(self._starts, sample) - 1
        return self._t_ns[i] + (sample - self._starts[i]) * NS_PER_S // self.sample_rate
