"""One Linux timerfd as the floor client's tick timer (bench/floorclient.py), written apart
from rig's (rig/clock/timer.py) as the rest of the floor is.

Why not `loop.call_at`: uvloop keeps time in whole milliseconds (libuv's cached `uv_now`), so
its timers fire up to a millisecond before a deadline and a pacer that never sends early then
spins on re-arms. A timerfd armed at an absolute CLOCK_MONOTONIC deadline (the clock of
`time.monotonic_ns()`) wakes on time on either loop, through the same `add_reader`, so the
`tick` and `tick-uvloop` variants pay for the same wake-up.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
from collections.abc import Callable

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p,
        ]  # fmt: skip
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class TickTimer:
    """`arm(deadline_ns)` calls `callback` from the loop at that monotonic instant; one pending
    deadline at a time (the earliest due slot). Falls back to `loop.call_at` without timerfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self.loop = loop
        self.callback = callback
        self.fd = -1
        if _LIBC is not None:
            self.fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        self.kind = "timerfd" if self.fd >= 0 else "call_at"
        if self.fd >= 0:
            self.spec = _Itimerspec()
            self.spec_ref = ctypes.byref(self.spec)
            loop.add_reader(self.fd, self._ready)

    def arm(self, deadline_ns: int) -> None:
        if self.fd < 0:
            self.loop.call_at(deadline_ns / 1e9, self.callback)
            return
        assert _LIBC is not None
        self.spec.it_value.tv_sec, self.spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if _LIBC.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, self.spec_ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _ready(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:  # a spurious readiness: nothing expired
            return
        self.callback()

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
