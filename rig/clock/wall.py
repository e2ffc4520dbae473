"""The wall clock, for the one place a protocol wants it: the NTP time in an RTCP sender
report (RFC 3550 pairs it with an RTP timestamp so peers can map media onto wall time).

Never used to measure anything: intervals and stamps come from the shared `Clock`.
"""

from __future__ import annotations

import time


def wall_ns() -> int:
    """Unix time now, in ns (the system's real-time clock: it can step)."""
    return time.time_ns()
