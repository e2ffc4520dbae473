"""The event loop watching itself: a cheap periodic task that feeds rig.core.selfcheck.

How this works: one task per event loop wakes every `period_ms` on the run's clock (the same
waits the send loops use) and records how late it woke (the loop's lag), the writer's queue
length and, every `run_delay_every` ticks, the loop thread's run-queue wait from
`/proc/self/task/<tid>/schedstat` (a ~10 us procfs read; None where the file is missing),
and at each rollout's mark and end the machine's steal time (`/proc/stat`), so a flagged
rollout says whether its stalls were a CPU wait, the hypervisor, or the loop's own.
It runs for the whole run, also while every rollout only receives, because arrival stamps
are taken on the loop too; every session on the loop also feeds it the timer wake-ups of
its frames, the densest probe of the loop's lag there is with many streams. A rollout marks
the monitor when it starts, asks for the stats of its own span when it ends, and for the
lag around each of its reply onsets' arrival stamps (rig.core.selfcheck.figure_bounds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable

from rig.clock.base import Clock
from rig.core.admission import Aimd, AimdConfig
from rig.core.loopmonitor import LoopMonitor, LoopStats, Mark
from rig.core.units import NS_PER_MS
from rig.procread import ProcFile

#: the unit of /proc/stat (USER_HZ)
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read_steal_ns(path: str | ProcFile = "/proc/stat") -> int | None:
    """The machine's total steal time (the `cpu` line's 8th value, in clock ticks) in ns:
    time a hypervisor ran something else while this VM's vCPUs wanted to run. None if
    unreadable (not Linux, or no such field). A `ProcFile`: read keeping the GIL."""
    try:
        if isinstance(path, ProcFile):
            first = path.read().split(b"\n", 1)[0]
        else:
            with open(path, "rb") as f:
                first = f.readline()
        return int(first.split()[8]) * (1_000_000_000 // CLOCK_TICKS_PER_S)
    except (OSError, ValueError, IndexError):
        return None


def schedstat_path(tid: int | None = None) -> str:
    return f"/proc/self/task/{tid or threading.get_native_id()}/schedstat"


def read_run_delay_ns(path: str | ProcFile) -> int | None:
    """Total ns the thread waited on a run queue (schedstat field 2), None if unreadable. A
    `ProcFile`: read keeping the GIL (the loop's own samples)."""
    try:
        if isinstance(path, ProcFile):
            return int(path.read().split()[1])
        with open(path, "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _proc_file(path: str, size: int) -> ProcFile | None:
    try:
        return ProcFile(path, size)
    except OSError:
        return None


class LoopWatch:
    """Owns the monitor task of one event loop. `start()` in the loop; `stop()` when done."""

    def __init__(
        self,
        clock: Clock,
        *,
        period_ms: float = 10.0,
        run_delay_every: int = 5,
        backlog: Callable[[], int] | None = None,
    ) -> None:
        self.clock = clock
        self.period_ns = round(period_ms * NS_PER_MS)
        self.run_delay_every = max(1, run_delay_every)
        self.backlog = backlog
        self.monitor = LoopMonitor()
        self._task: asyncio.Task[None] | None = None
        self._path: ProcFile | None = None  # this loop thread's schedstat
        self._stat: ProcFile | None = None  # /proc/stat's first line (steal)
        self._users = 0

    def start(self) -> None:
        """Start the task on the running loop (its thread is the one whose run delay counts).
        Safe to call again: every start needs a matching stop; the last stop ends the task."""
        self._users += 1
        if self._task is None or self._task.done():
            self._path = _proc_file(schedstat_path(), 256)
            if self._stat is None:
                self._stat = _proc_file("/proc/stat", 512)
            self._sample_run_delay()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="loopwatch")

    async def stop(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users or self._task is None:
            return
        task, self._task = self._task, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def mark(self) -> Mark:
        self._sample_run_delay()
        self._sample_steal()
        return self.monitor.mark(self.clock.now_ns())

    def since(self, mark: Mark) -> LoopStats:
        self._sample_run_delay()
        self._sample_steal()
        return self.monitor.since(mark, self.clock.now_ns())

    def _sample_steal(self) -> None:
        """Per rollout mark only (a ~30 us read): steal is told per rollout, not per tick."""
        ns = read_steal_ns(self._stat if self._stat is not None else "/proc/stat")
        if ns is not None:
            self.monitor.steal(ns)

    def _sample_run_delay(self) -> None:
        if self._path is not None:
            ns = read_run_delay_ns(self._path)
            if ns is not None:
                self.monitor.run_delay(ns)

    async def _run(self) -> None:
        clock, monitor, period = self.clock, self.monitor, self.period_ns
        due = clock.now_ns() + period
        k = 0
        while True:
            await clock.sleep_until(due)
            now = clock.now_ns()
            monitor.tick(due, now)
            if self.backlog is not None:
                monitor.backlog(now, self.backlog())
            k += 1
            if k % self.run_delay_every == 0:
                self._sample_run_delay()
            due += period
            if due <= now:  # after a long block: measure from now, do not fire a burst
                due = now + period


class AutoGate:
    """`async with gate:` admission for `--concurrency auto` (rig.core.admission): a rollout
    enters while fewer than the AIMD limit run and the loop's last interval was in budget."""

    def __init__(self, watch: LoopWatch, cfg: AimdConfig | None = None) -> None:
        self.watch = watch
        self.aimd = Aimd(cfg or AimdConfig())
        self.running = 0
        self.peak = 0
        self._mark: Mark | None = None
        self.poll_ns = 20 * NS_PER_MS
        self._turn = asyncio.Lock()  # one waiter polls at a time, the rest queue (FIFO)

    def _decide(self) -> None:
        now = self.watch.clock.now_ns()
        if self._mark is None:
            self._mark = self.watch.mark()
            self.aimd.last_ns = now
            return
        if self.aimd.due(now):
            stats = self.watch.since(self._mark)
            self.aimd.update(now, stats.lag_p99_ms if stats.ticks else None, self.peak)
            self._mark = self.watch.mark()
            self.peak = self.running

    async def __aenter__(self) -> None:
        clock = self.watch.clock
        async with self._turn:
            while True:
                self._decide()
                if self.aimd.may_start(self.running):
                    break
                await clock.sleep_until(clock.now_ns() + self.poll_ns)
            self.running += 1
        self.peak = max(self.peak, self.running)

    async def __aexit__(self, *exc: object) -> None:
        self.running -= 1
        self._decide()
