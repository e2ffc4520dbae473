"""The session timeline: sample positions <-> shared-clock times.

Sample `k` of a track at `sample_rate` sits at `t0_ns + k * 1e9 / sample_rate` (floor to the
ns); a time maps back to the first sample at or after it (ceil: audio cannot play before it
arrives). Integer arithmetic on the sample count, never accumulated, so positions a day
apart are as exact as neighbours. The pacer, the director and the playback queue share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rig.core.units import NS_PER_S


@dataclass(frozen=True, slots=True)
class Timeline:
    t0_ns: int
    sample_rate: int

    def time_of(self, sample: int) -> int:
        """Shared-clock time of sample position `sample`."""
        return self.t0_ns + sample * NS_PER_S // self.sample_rate

    def sample_at(self, t_ns: int) -> int:
        """The first sample position at or after `t_ns`."""
        return -((-(t_ns - self.t0_ns) * self.sample_rate) // NS_PER_S)
