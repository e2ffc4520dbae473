"""Where in the frame period each concurrent stream sends (its phase).

Streams are spread over the period in bit-reversal order (0, 1/2, 1/4, 3/4, ...), so any
number of them are near-evenly spaced, and put on one of `PHASE_SLOTS` instants: streams
on one slot share a deadline, so one timer wake-up serves them all (rig.sessiontick), and
none is sent early.
"""

from __future__ import annotations

import math

#: instants per frame period that stream phases are put on (1 ms apart for 20 ms frames):
#: few enough that one wake-up serves several streams, enough to keep bursts small
PHASE_SLOTS = 20


def phase_of(k: int, slots: int = PHASE_SLOTS) -> float:
    """The phase, a fraction of the frame period in [0, 1), of the `k`-th stream started."""
    phase, bit = 0.0, 0.5
    while k:
        if k & 1:
            phase += bit
        k >>= 1
        bit /= 2
    return math.floor(phase * slots) / slots
