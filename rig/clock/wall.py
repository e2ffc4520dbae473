"""The wall clock, for the one place a protocol wants it: the NTP time in an RTCP sender
report (RFC 3550 pairs it with an RTP timestamp so peers can map media onto wall time).

Never used to measure anything: intervals and stamps come from the shared `Clock`.
"""

from __future__ import annotations

import time

from rig.clock.base import Clock


def wall_ns() -> int:
    """Unix time now, in ns (the system's real-time clock: it can step)."""
    return time.time_ns()


def epoch_offset_ns(clock: Clock) -> int:
    """Wall clock minus `clock`, read back to back (the wall read sits between two clock
    reads; their midpoint is used): add it to a shared-clock time to label it with Unix time
    for dashboards. Labels only: the wall clock can step, intervals never come from it."""
    before = clock.now_ns()
    wall = time.time_ns()
    after = clock.now_ns()
    return wall - (before + after) // 2
