"""Keep one Python thread state on a foreign audio thread for as long as the thread lives.

Why: PyAudio enters every stream callback with `PyGILState_Ensure` and leaves with
`PyGILState_Release` on PortAudio's thread, which Python did not create. With nothing else
holding a thread state there, CPython builds a new one on every call and destroys it on the
way out: a 16 KiB frame stack `mmap`ed and `munmap`ed (the process's memory-map lock, taken
for writing, which no priority inheritance protects) and the interpreter's thread-list lock
twice, per callback, i.e. twice per JACK period with split streams. On JACK's real-time
thread that made the client miss its 5.33 ms cycle now and then (docs/devices.md has the
numbers). cffi, and so python-sounddevice, keeps the thread state for the thread's life.

`pin_thread_state()` does the same for PyAudio: on the first callback on a thread it takes
one more `PyGILState_Ensure` that it never releases, so PyAudio's own Release no longer drops
the count to zero and every later callback reuses the state. The state is freed with the
interpreter (a few KiB per PortAudio thread; the thread lives until `PyAudio.terminate`).
"""

from __future__ import annotations

import ctypes
import threading

# a threading.local lives in the thread state: it survives from one callback to the next only
# once the state is pinned, so it also tells whether this thread is pinned already
_local = threading.local()
# resolved once, here: a missing C API (not CPython) fails at import, never in a callback
# (a PYFUNCTYPE prototype: called with the GIL held, as the C API requires)
_gil_state_ensure = ctypes.PYFUNCTYPE(ctypes.c_int)(("PyGILState_Ensure", ctypes.pythonapi))


def pin_thread_state() -> bool:
    """Call at the top of every callback; True on the call that pinned this thread."""
    if getattr(_local, "pinned", False):
        return False
    # the thread state exists and holds the GIL (we are in a callback): this only counts up
    _gil_state_ensure()
    _local.pinned = True
    return True
