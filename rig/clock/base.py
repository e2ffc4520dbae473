"""The shared clock.

Every timestamp the rig records is an integer number of nanoseconds on one monotonic
clock (`CLOCK_MONOTONIC`, what `time.monotonic_ns()` reads). It is system-wide on Linux,
so a reference system in another process on the same host stamps on the same clock; that
is what makes ground-truth checks possible.

The sans-I/O core never reads a clock: callers pass `t_ns` in. Only the asyncio shells
hold a `Clock`, and tests hand them a `FakeClock` whose time moves only when told.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from typing import Protocol, runtime_checkable

from rig.clock.timer import TickFn, TickHandle, precise_timer, run_tick
from rig.core.units import NS_PER_MS as NS_PER_MS  # re-exported: the clock's units
from rig.core.units import NS_PER_S as NS_PER_S


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock in integer nanoseconds, and a way to wait for a point on it."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None: ...


@runtime_checkable
class TickClock(Protocol):
    """A clock that can also call a function at its deadlines from one shared wake-up
    (rig.clock.timer, "Ticks"); None from `call_at`: not here, wait with `sleep_until`."""

    def call_at(self, t_ns: int, fn: TickFn) -> TickHandle | None: ...


class MonotonicClock:
    """The real shared clock. Waits use a precise timer where the platform has one."""

    def __init__(self, precise: bool = True) -> None:
        self._precise = precise

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def call_at(self, t_ns: int, fn: TickFn) -> TickHandle | None:
        """Ticks from the loop's timerfd (None without one: the caller sleeps instead)."""
        timer = precise_timer() if self._precise else None
        return None if timer is None else timer.call_at(t_ns, fn)

    async def sleep_until(self, t_ns: int) -> None:
        if self._precise:
            timer = precise_timer()
            if timer is not None:
                await timer.sleep_until(t_ns)
                return
        delay_s = (t_ns - time.monotonic_ns()) / NS_PER_S
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        # asyncio's timer works in float seconds and may fire a hair early: a deadline is a
        # floor, so wait once more for what is left
        left_ns = t_ns - time.monotonic_ns()
        if left_ns > 0:
            await asyncio.sleep(left_ns / NS_PER_S)


class FakeClock:
    """A clock that moves only when told to, or when every waiter is asleep.

    `advance`/`set` move it by hand (sans-I/O tests). In async tests, `sleep_until` parks the
    caller; once the other ready tasks have had their turn, time jumps to the earliest parked
    deadline and that waiter wakes. Several tasks sleeping on one FakeClock therefore
    interleave exactly as their deadlines say, and virtual seconds pass in microseconds.
    """

    #: event-loop turns to let ready tasks run before time jumps
    SETTLE_TURNS = 8

    def __init__(self, start_ns: int = 0) -> None:
        self._t_ns = start_ns
        self._waiters: list[tuple[int, int, asyncio.Future[None] | TickHandle]] = []
        self._count = 0
        self._advancer: asyncio.Task[None] | None = None

    def now_ns(self) -> int:
        return self._t_ns

    def advance(self, dt_ns: int) -> int:
        if dt_ns < 0:
            raise ValueError("a monotonic clock cannot go back")
        self._t_ns += dt_ns
        return self._t_ns

    def set(self, t_ns: int) -> None:
        if t_ns < self._t_ns:
            raise ValueError("a monotonic clock cannot go back")
        self._t_ns = t_ns

    async def sleep_until(self, t_ns: int) -> None:
        if t_ns <= self._t_ns:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._park(t_ns, fut)
        await fut

    def call_at(self, t_ns: int, fn: TickFn) -> TickHandle:
        """`fn(deadline)` when virtual time reaches `t_ns`, as a waiter of its own, and again
        at whatever deadline it returns (None: done)."""
        handle = TickHandle(fn)
        self._park(t_ns, handle)
        return handle

    def _park(self, t_ns: int, item: asyncio.Future[None] | TickHandle) -> None:
        self._count += 1
        heapq.heappush(self._waiters, (t_ns, self._count, item))
        if self._advancer is None or self._advancer.done():
            self._advancer = asyncio.get_running_loop().create_task(self._advance_loop())

    async def _advance_loop(self) -> None:
        while self._waiters:
            for _ in range(self.SETTLE_TURNS):
                await asyncio.sleep(0)
            if not self._waiters:
                break
            t_ns, _, item = heapq.heappop(self._waiters)
            if isinstance(item, TickHandle):
                if item.cancelled:
                    continue
                self._t_ns = max(self._t_ns, t_ns)
                nxt = run_tick(item, t_ns, asyncio.get_running_loop())
                if nxt is not None and not item.cancelled:
                    self._count += 1
                    heapq.heappush(self._waiters, (nxt, self._count, item))
                continue
            if item.cancelled():
                continue
            if t_ns > self._t_ns:
                self._t_ns = t_ns
            item.set_result(None)
