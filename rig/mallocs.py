"""glibc's malloc thresholds for a streaming process: no mmap and munmap per socket read.

Why: asyncio's selector transports read with `sock.recv(256 KiB)`, so every read allocates a
256 KiB bytes object and shrinks it to the message's size. glibc serves a block that large
with mmap (its threshold starts at 128 KiB and adapts only when such a block is freed, not
when it is shrunk), so every message costs an mmap, page faults and an mremap: perf put about
a fifth of `rig sim`'s CPU at 100 streams there (issue #32). With the mmap threshold above
the read size, and the trim threshold with it (else the heap's top is handed back and
faulted in again at the next read), these blocks stay in the heap: the sim's CPU per frame
went from 124-143 to 90-97 µs at 100 streams (docs/pacing.md). uvloop reads into one buffer
it keeps and does not need this; it does no harm there.

`tune()` sets both once per process (glibc's `mallopt` through ctypes; elsewhere, or where
the environment already sets them, nothing) and says what it did, for the manifest. The cost
is memory: up to TRIM_THRESHOLD_BYTES of freed heap kept by the process instead of returned.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
#: above asyncio's 256 KiB read (selector_events.max_size) with room to spare
MMAP_THRESHOLD_BYTES = 1 << 20
TRIM_THRESHOLD_BYTES = 32 << 20

_tuned: dict[str, Any] | None = None


def tune() -> dict[str, Any]:
    """Raise glibc's mmap and trim thresholds (once per process); what was done."""
    global _tuned
    if _tuned is None:
        _tuned = _apply()
    return dict(_tuned)


def _apply() -> dict[str, Any]:
    if not sys.platform.startswith("linux"):
        return {"tuned": False, "reason": "not Linux"}
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "malloc.mmap_threshold" in tunables:
        return {"tuned": False, "reason": "set by the environment"}
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return {"tuned": False, "reason": "no mallopt (not glibc)"}
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        return {"tuned": False, "reason": "mallopt refused the mmap threshold"}
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return {
        "tuned": True,
        "mmap_threshold_bytes": MMAP_THRESHOLD_BYTES,
        "trim_threshold_bytes": TRIM_THRESHOLD_BYTES,
    }
