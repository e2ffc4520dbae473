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
SCHED_FIFO on the loop's thread, as JACK does for its audio thread. `bench/concurrency.py
--hogs 2` (two busy processes on a 2-core machine, 50 rollouts): uplink lateness p99
7.6-16.7 ms and up to 146 stalls without it, 0.9-1.1 ms and no stall with it.

A real-time loop is not enough on its own: the loop needs the GIL, and any other Python
thread of the process may hold it (the writer, asyncio's executor threads, the analysis
pool's manager and feeder threads, a live-view feed). A normal-priority holder that the
kernel preempts keeps the GIL while it waits for a CPU, so the real-time loop waits with it:
a priority inversion. Traced with `perf sched` on this machine, the writer was preempted
holding the GIL and the loop slept on it for 24-32 ms (docs/pacing.md, "The GIL's other
holders"). So while the loop is real time, every other Python thread of the process runs
at SCHED_FIFO `HELPER_PRIORITY` (1: below the loop, above every normal process): threads
that exist are raised, threads started meanwhile raise themselves as they start (a
`threading.setprofile` hook that removes itself), and all are put back on exit. A thread
that is already real time (JACK's, PortAudio's) is never lowered. The GIL lets only one of
these threads run Python at a time, so together they never take more than the one core the
loop could take itself. With SCHED_RESET_ON_FORK on all of them, no process they start
(the analysis worker, a reference system) inherits real-time scheduling.
Without the privilege (root, CAP_SYS_NICE or an RLIMIT_RTPRIO, e.g. the `audio` group's
`rtprio` in limits.conf) the run goes on at normal priority and says so in the manifest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

from rig.rtbudget import rt_budget

T = TypeVar("T")

SWITCH_INTERVAL_S = 0.001
#: threads for the run's blocking calls (disk, short analysis), all started before streaming
IO_THREADS = 4
#: SCHED_FIFO priority of the process's other Python threads while a loop thread is real time
HELPER_PRIORITY = 1
_REAL_TIME = frozenset(
    getattr(os, name) for name in ("SCHED_FIFO", "SCHED_RR", "SCHED_DEADLINE") if hasattr(os, name)
)


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
    """SCHED_FIFO at `priority` (1-99) for the calling thread while inside, and SCHED_FIFO
    `HELPER_PRIORITY` for the process's other Python threads (they share its GIL); 0 leaves
    it as is. Yields what was obtained, for the manifest; never raises for a missing privilege."""
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
    tid = threading.get_native_id()
    # raised as a helper by another real-time loop of this process: restore what it had
    saved = _HELPERS.claim(tid) or (os.sched_getscheduler(0), os.sched_getparam(0))
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
    helper = min(HELPER_PRIORITY, prio)
    _HELPERS.enter(helper if helper > 0 else 0, tid)
    try:
        yield {
            "policy": "SCHED_FIFO",
            "priority": prio,
            "requested_priority": priority,
            "helper_priority": helper if helper > 0 else None,
            # the kernel may stop every real-time thread for the rest of a period
            "rt_budget": rt_budget(),
        }
    finally:
        _HELPERS.exit()
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, *saved)


class _Helpers:
    """The process's other Python threads at SCHED_FIFO while any loop thread is real time
    (counted: nested or concurrent loops share one set), each put back when the last ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._prio = 0
        self._saved: dict[int, tuple[int, os.sched_param]] = {}  # tid -> policy before
        self._loops: set[int] = set()  # real-time loop threads: never touched here
        self._prev_hook: Any = None

    @property
    def raised(self) -> int:
        """How many threads are at the helper priority now (for tests and benches)."""
        with self._lock:
            return len(self._saved)

    def enter(self, prio: int, loop_tid: int) -> None:
        with self._lock:
            self._loops.add(loop_tid)
            self._users += 1
            if self._users > 1 or prio <= 0:
                return
            self._prio = prio
            self._prev_hook = threading.getprofile()
            threading.setprofile(self._hook)
            for t in threading.enumerate():
                if t.native_id is not None:
                    self._raise(t.native_id)

    def exit(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            self._loops.clear()
            if self._prio <= 0:
                return
            threading.setprofile(self._prev_hook)
            self._prev_hook = None
            alive = set(_task_ids())
            for tid, (policy, param) in self._saved.items():
                if tid in alive and _is_helper(tid, self._prio):
                    with contextlib.suppress(OSError):
                        os.sched_setscheduler(tid, policy, param)
            self._saved.clear()
            self._prio = 0

    def claim(self, tid: int) -> tuple[int, os.sched_param] | None:
        """A raised thread becomes a real-time loop itself: what it had before it was raised."""
        with self._lock:
            return self._saved.pop(tid, None)

    def _raise(self, tid: int) -> None:
        """Under the lock: `tid` to the helper priority unless it is a loop or real time."""
        if tid in self._loops or tid in self._saved:
            return
        try:
            policy, param = os.sched_getscheduler(tid), os.sched_getparam(tid)
            if policy & ~os.SCHED_RESET_ON_FORK in _REAL_TIME:
                return
            fifo = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
            os.sched_setscheduler(tid, fifo, os.sched_param(self._prio))
        except OSError:
            return  # gone, or not permitted: it stays as it was
        self._saved[tid] = (policy, param)

    def _hook(self, frame: FrameType, event: str, arg: Any) -> Any:
        """First profile event of a thread started while helpers are up: raise it, then
        hand the thread the profiler it would have had."""
        prev = self._prev_hook
        sys.setprofile(prev)
        with self._lock:
            if self._users and self._prio > 0:
                self._raise(threading.get_native_id())
        return prev(frame, event, arg) if prev is not None else None


def _is_helper(tid: int, prio: int) -> bool:
    try:
        policy, param = os.sched_getscheduler(tid), os.sched_getparam(tid)
    except OSError:
        return False
    return policy & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO and param.sched_priority == prio


def _task_ids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


_HELPERS = _Helpers()


class IoThreads:
    """Blocking calls off the loop (`await io.run(fn, *args)`) on threads that all exist
    before the streams start.

    Why not `asyncio.to_thread`: its pool starts a thread on demand, from the loop thread,
    and `Thread.start()` waits until the new thread has run. A new thread starts at normal
    priority (SCHED_RESET_ON_FORK), so on a busy machine the real-time loop waits for it to
    get a CPU: measured here, 9 ms median and 43 ms p99 per start with four CPU hogs (0.6 /
    6 ms on the shared box without them), every stream stalled meanwhile. Rollouts start and
    end while others stream, and that is when the pool grew."""

    def __init__(self, n: int = IO_THREADS) -> None:
        self.n = max(1, n)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    async def start(self) -> None:
        """Start every thread now (from a worker thread: the loop never waits for one)."""
        if self._pool is None:
            self._pool = await asyncio.to_thread(prestarted_pool, self.n, "rig-io")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        pool = self._pool
        if pool is None:  # not started (or stopped): asyncio's own pool
            return await asyncio.to_thread(fn, *args, **kwargs)
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True)


def prestarted_pool(n: int, name: str) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool whose `n` threads are all running when it is returned (a pool starts a
    thread only when no idle one takes the task: `n` tasks that wait for each other)."""
    pool = concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix=name)
    barrier = threading.Barrier(n)
    for f in [pool.submit(barrier.wait, 10.0) for _ in range(n)]:
        f.result()
    return pool
