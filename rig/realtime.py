"""Process settings for streaming: what keeps the audio loop's wake-ups on time.

While a run streams, the interpreter itself can stall every stream at once:
- a full (generation-2) garbage collection scans every object: 15-45 ms at 50 rollouts;
- another thread (the writer, the live view) holds the GIL for up to the switch interval
  (5 ms by default) before the loop gets it back.
`streaming()` freezes what exists (it lives for the run), stops automatic full collections
(young generations still collect) and hands the GIL back every 1 ms; on exit it restores all
of it. It does not touch the audio path; it only removes the interpreter's own pauses.

`scheduling(priority)` removes the machine's: other processes (the system under test on the
same box, a build, a noisy neighbour) take the core the loop needs. It asks the kernel for
SCHED_FIFO on the loop's thread only, as JACK does for its audio thread; with
SCHED_RESET_ON_FORK every thread or process started from it (disk and analysis workers) is
back to normal scheduling. `bench/concurrency.py --hogs 2` (two busy processes on a 2-core
machine, 50 rollouts): uplink lateness p99 7.6-16.7 ms and up to 146 stalls without it,
0.9-1.1 ms and no stall with it.
Without the privilege (root, CAP_SYS_NICE or an RLIMIT_RTPRIO, e.g. the `audio` group's
`rtprio` in limits.conf) the run goes on at normal priority and says so in the manifest.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from typing import Any

SWITCH_INTERVAL_S = 0.001


@contextlib.contextmanager
def streaming() -> Iterator[None]:
    gc.collect()
    gc.freeze()
    saved_gc = gc.get_threshold()
    gc.set_threshold(saved_gc[0], saved_gc[1], 1_000_000)
    saved_switch_s = sys.getswitchinterval()
    sys.setswitchinterval(min(saved_switch_s, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(saved_switch_s)
        gc.set_threshold(*saved_gc)
        gc.unfreeze()


@contextlib.contextmanager
def scheduling(priority: int) -> Iterator[dict[str, Any]]:
    """SCHED_FIFO at `priority` (1-99) for the calling thread while inside; 0 leaves it as is.
    Yields what was obtained, for the manifest; never raises for a missing privilege."""
    if priority <= 0:
        yield {"policy": "default", "requested_priority": 0}
        return
    if not hasattr(os, "sched_setscheduler"):
        yield {"policy": "default", "requested_priority": priority, "reason": "not Linux"}
        return
    if len(os.sched_getaffinity(0)) < 2:
        # with one CPU a busy real-time loop would leave the writer and the system under
        # test only the kernel's 5 % real-time throttling margin
        yield {"policy": "default", "requested_priority": priority, "reason": "one CPU"}
        return
    saved_policy, saved_param = os.sched_getscheduler(0), os.sched_getparam(0)
    prio = max(1, min(priority, os.sched_get_priority_max(os.SCHED_FIFO)))
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(prio))
    except OSError as exc:
        yield {
            "policy": "default",
            "requested_priority": priority,
            "reason": f"SCHED_FIFO not permitted ({exc.strerror}): run as root, with "
            "CAP_SYS_NICE or an rtprio limit (limits.conf) to get it",
        }
        return
    try:
        yield {"policy": "SCHED_FIFO", "priority": prio, "requested_priority": priority}
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, saved_policy, saved_param)
