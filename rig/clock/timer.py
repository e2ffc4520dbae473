"""A nanosecond-precise wake-up for the asyncio loop, from a Linux timerfd.

asyncio rounds every selector timeout up to a whole millisecond (epoll takes ms), so a
task that sleeps until a deadline wakes anywhere in [deadline, deadline + 1 ms]. For a
pacer that records sub-millisecond lateness that is most of the error budget. A timerfd
armed at an absolute CLOCK_MONOTONIC time becomes readable at the deadline itself (kernel
hrtimer), and the loop wakes on it like any other fd.

One timerfd per event loop serves every waiter: a heap of (deadline, future), the fd armed
at the earliest one. Where timerfd is unavailable `precise_timer()` returns None and the
caller falls back to `asyncio.sleep`.

Ticks (`call_at`): a waiter may instead be a plain function, called synchronously at the
wake itself with its deadline; it returns its next deadline (or None: done). One wake then
serves every stream whose frame is due, each with its own clock read, without a future, a
task step and a wake-up per stream per frame (about 70 µs a frame on this VM, issue #32).
A wake keeps serving while anything on the heap has come due by the time it gets there, so
a batch that takes a while does not cost another trip through the event loop; but each
function runs at most once per wake, so a loop that is behind still reads its sockets
between two rounds of frames.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import time
import weakref
from collections.abc import Callable

from rig.procread import gil_keeping_libc

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _load_libc() -> ctypes.CDLL | None:
    # PyDLL: the call keeps the GIL. timerfd_settime never blocks, and releasing the GIL at
    # every wake handed it to the writer thread and waited to get it back
    libc = gil_keeping_libc()
    if libc is None:
        return None
    try:
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


#: a tick function: called with its deadline (ns); returns the next one, or None when done
TickFn = Callable[[int], "int | None"]


class TickHandle:
    """A `call_at` registration; `cancel()` stops further calls (safe to call twice)."""

    __slots__ = ("fn", "cancelled")

    def __init__(self, fn: TickFn) -> None:
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def run_tick(handle: TickHandle, t_ns: int, loop: asyncio.AbstractEventLoop) -> int | None:
    """Call a tick function for its deadline; an exception out of it is the loop's to
    report (it must not take the other streams' ticks down with it)."""
    try:
        return handle.fn(t_ns)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - one stream's fault must not stop the others
        loop.call_exception_handler({"message": "tick function failed", "exception": exc})
        return None


class PreciseTimer:
    """Wakes coroutines at absolute monotonic deadlines through one timerfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        assert _LIBC is not None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd: int = fd
        self._loop = loop
        self._heap: list[tuple[int, int, asyncio.Future[None] | TickHandle]] = []
        self._counter = itertools.count()
        self._armed_ns: int | None = None
        #: one itimerspec, rewritten at every arm (no ctypes object built per frame)
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        loop.add_reader(fd, self._on_ready)

    def close(self) -> None:
        try:
            self._loop.remove_reader(self._fd)
        except (RuntimeError, ValueError):
            pass
        os.close(self._fd)

    async def sleep_until(self, t_ns: int) -> None:
        if t_ns <= time.monotonic_ns():
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        self._push(t_ns, fut)
        await fut

    def call_at(self, t_ns: int, fn: TickFn) -> TickHandle:
        """Call `fn(deadline)` from the timer's wake at `t_ns` (or the next wake, if that has
        passed), and again at whatever deadline it returns, until it returns None."""
        handle = TickHandle(fn)
        self._push(t_ns, handle)
        return handle

    def _push(self, t_ns: int, item: asyncio.Future[None] | TickHandle) -> None:
        heapq.heappush(self._heap, (t_ns, next(self._counter), item))
        if self._armed_ns is None or t_ns < self._armed_ns:
            self._arm(max(t_ns, 1))

    def _arm(self, t_ns: int) -> None:
        assert _LIBC is not None
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(t_ns, 1_000_000_000)
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._armed_ns = t_ns

    def _on_ready(self) -> None:
        # the expiry count is not read here: re-arming resets it (timerfd_create(2): a read
        # counts "since the timer settings were last modified"), so only a wake that leaves
        # the timer unarmed reads it, one syscall fewer per wake
        self._armed_ns = None
        heap = self._heap
        again: list[tuple[int, TickHandle]] = []  # served in this wake: next wake at the soonest
        now = time.monotonic_ns()
        while heap and heap[0][0] <= now:
            while heap and heap[0][0] <= now:
                t_ns, _, item = heapq.heappop(heap)
                if isinstance(item, TickHandle):
                    if item.cancelled:
                        continue
                    nxt = run_tick(item, t_ns, self._loop)
                    if nxt is not None and not item.cancelled:
                        again.append((nxt, item))
                elif not item.done():
                    item.set_result(None)
            now = time.monotonic_ns()  # what came due while this batch was served
        # Each function at most once per wake, even when it is behind: the loop's I/O (the
        # replies, the writes) runs before it is called again, so an overloaded loop slows
        # down evenly instead of serving frames and never reading.
        for nxt, item in again:
            heapq.heappush(heap, (nxt, next(self._counter), item))
        # Drop cancelled waiters at the head so we do not arm for them.
        while heap and _dead(heap[0][2]):
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])
        else:
            try:
                os.read(self._fd, 8)  # nothing to wait for: not readable again until armed
            except BlockingIOError:
                pass


def _dead(item: asyncio.Future[None] | TickHandle) -> bool:
    return item.cancelled if isinstance(item, TickHandle) else item.done()


_TIMERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PreciseTimer] = (
    weakref.WeakKeyDictionary()
)


def wakeup_method() -> str:
    """How MonotonicClock wakes at a deadline here (recorded in the run manifest): "timerfd",
    or "asyncio" where there is none (not Linux): the event loop's own timer, which epoll
    rounds up to whole milliseconds; kqueue (macOS) does not."""
    return "timerfd" if _LIBC is not None else "asyncio"


def precise_timer() -> PreciseTimer | None:
    """The running loop's PreciseTimer, created on first use; None where unsupported."""
    if _LIBC is None:
        return None
    loop = asyncio.get_running_loop()
    timer = _TIMERS.get(loop)
    if timer is None:
        try:
            timer = PreciseTimer(loop)
        except (OSError, NotImplementedError):
            return None
        _TIMERS[loop] = timer
    return timer
