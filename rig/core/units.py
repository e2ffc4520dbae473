"""Units of the shared clock: every time in the rig is an integer count of nanoseconds.

The one definition of each conversion factor; everything else imports it from here.
"""

from __future__ import annotations

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
NS_PER_US = 1_000


def ms_to_ns(ms: float) -> int:
    """A (server's) millisecond stamp as integer ns."""
    return round(ms * NS_PER_MS)
