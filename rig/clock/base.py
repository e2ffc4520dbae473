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
import time
from typing import Protocol, runtime_checkable

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock in integer nanoseconds, and a way to wait for a point on it."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None: ...


class MonotonicClock:
    """The real shared clock. Waits use a precise timer where the platform has one."""

    def __init__(self, precise: bool = True) -> None:
        self._precise = precise

    def now_ns(self) -> int:
        return time.monotonic_ns()

    async def sleep_until(self, t_ns: int) -> None:
        if self._precise:
            from rig.clock.timer import precise_timer

            timer = precise_timer()
            if timer is not None:
                await timer.sleep_until(t_ns)
                return
        delay_s = (t_ns - time.monotonic_ns()) / NS_PER_S
        if delay_s > 0:
            await asyncio.sleep(delay_s)


class FakeClock:
    """A clock that moves only when told to; `sleep_until` jumps straight to the deadline.

    Async code driven by a FakeClock runs virtual seconds in microseconds. Waiters are woken
    in deadline order, so several tasks sleeping on one FakeClock interleave as they would in
    real time.
    """

    def __init__(self, start_ns: int = 0) -> None:
        self._t_ns = start_ns

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
        # Yield first so other ready tasks with earlier deadlines run before time jumps.
        await asyncio.sleep(0)
        if t_ns > self._t_ns:
            self._t_ns = t_ns
