"""Process settings for streaming: what keeps the audio loop's wake-ups on time.

While a run streams, the interpreter itself can stall every stream at once:
- a full (generation-2) garbage collection scans every object: 15-45 ms at 50 rollouts;
- another thread (the writer, the live view) holds the GIL for up to the switch interval
  (5 ms by default) before the loop gets it back.
`streaming()` freezes what exists (it lives for the run), stops automatic full collections
(young generations still collect) and hands the GIL back every 1 ms; on exit it restores all
of it. It does not touch the audio path; it only removes the interpreter's own pauses.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator

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
