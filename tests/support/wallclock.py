"""Is the host's wall clock steady against the monotonic one?

Why: an RTCP sender report's NTP field is wall time by definition (rig.clock.wall), and the
tests that check what the far end maps RTP onto compare it with `time.time_ns() -
time.monotonic_ns()` read once at their start. On 2026-12-06 a Firecracker VM's
CLOCK_REALTIME was stepped +0.5 ms every 100 ms by something outside the guest's processes
(5 ms a second against CLOCK_MONOTONIC): that truth was then off by 9-12 ms and those tests
failed at every commit, the one that had passed CI the day before included. They skip such
a host with the figure measured, as the netns tests skip a kernel without namespaces.
"""

from __future__ import annotations

import time

#: (wall - monotonic) may move this much in `window_s` before the wall clock counts as stepped
STEADY_MS = 0.5


def wall_clock_drift_ms(window_s: float = 0.4) -> float:
    """How far CLOCK_REALTIME moved against CLOCK_MONOTONIC over `window_s` (ms)."""
    before = time.time_ns() - time.monotonic_ns()
    time.sleep(window_s)
    return abs(time.time_ns() - time.monotonic_ns() - before) / 1e6


def unsteady_wall_clock_reason(window_s: float = 0.4) -> str | None:
    """A skip reason when the host's wall clock is being stepped or slewed fast; None: steady."""
    moved = wall_clock_drift_ms(window_s)
    if moved <= STEADY_MS:
        return None
    return (
        f"the host's wall clock moved {moved:.1f} ms against CLOCK_MONOTONIC in {window_s} s "
        "(stepped from outside): an RTCP NTP time cannot be checked against a wall clock read once"
    )
