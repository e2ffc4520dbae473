"""The race that 3.11's `asyncio.wait_for` loses, made deterministic (rig/aio.py says why).

`complete_and_cancel` finishes what a task awaits and cancels the task in the same loop tick:
the awaited thing's wake-up is queued first, the cancel second, exactly the order in which
`wait_for` returns the result and drops the cancel. `settle` then lets the loop run a fixed
number of ticks (no wall time): a task that honours its cancel has ended by then; one that
lost it is still waiting on its next await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

TICKS = 50


def complete_and_cancel(task: asyncio.Task[Any], complete: Callable[[], object]) -> None:
    complete()
    task.cancel()


async def settle(ticks: int = TICKS) -> None:
    for _ in range(ticks):
        await asyncio.sleep(0)


async def awaiting(task: asyncio.Task[Any], cond: Callable[[], bool]) -> None:
    """Run the loop until `task` has reached the await `cond` tells of (fails if never)."""
    for _ in range(TICKS):
        if cond():
            return
        assert not task.done(), task
        await asyncio.sleep(0)
    raise AssertionError("the task never reached the await under test")
