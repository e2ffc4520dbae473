"""rig/aio.py: waits that never swallow a cancel, on controlled futures (no wall time)."""

from __future__ import annotations

import asyncio

import pytest

from rig.aio import finish_or_cancel, raise_if_cancelling
from tests.support.cancelrace import complete_and_cancel, settle


async def test_the_race_itself_3_11_wait_for_drops_the_cancel_and_timeout_keeps_it() -> None:
    """The premise of the audit, checked on this interpreter: if a later Python fixes
    wait_for, the first assertion says so (and the ban in pyproject.toml can go)."""

    async def waits(how: str, fut: asyncio.Future[int]) -> int:
        if how == "wait_for":
            return await asyncio.wait_for(fut, 10)
        async with asyncio.timeout(10):
            return await fut

    outcomes = {}
    for how in ("wait_for", "timeout"):
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(waits(how, fut))
        await settle(3)
        complete_and_cancel(task, lambda f=fut: f.set_result(7))  # type: ignore[misc]
        await settle()
        outcomes[how] = "cancelled" if task.cancelled() else task.result()
    assert outcomes == {"wait_for": 7, "timeout": "cancelled"}


async def test_raise_if_cancelling_stops_a_loop_whose_await_lost_the_cancel() -> None:
    rounds = 0

    async def loop_on() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                pass  # some library swallowing it
            raise_if_cancelling()

    task = asyncio.create_task(loop_on())
    await settle(3)
    task.cancel()
    await settle()
    assert task.cancelled() and rounds < 10


async def test_finish_or_cancel_lets_a_task_that_ends_in_time_end() -> None:
    done = asyncio.Event()

    async def work() -> str:
        await done.wait()
        return "flushed"

    task = asyncio.create_task(work())
    stopper = asyncio.create_task(finish_or_cancel(task, 10))
    await settle(3)
    done.set()
    await stopper
    assert task.result() == "flushed"


async def test_finish_or_cancel_cancels_a_task_that_does_not_end_in_time() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    await finish_or_cancel(task, 0.01)
    assert task.cancelled()


async def test_a_cancelled_stopper_still_stops_its_task_then_raises() -> None:
    """The old stop() pattern (`except CancelledError: pass` around the wait) returned
    normally: the cancelled caller then ran on."""
    task = asyncio.create_task(asyncio.Event().wait())
    stopper = asyncio.create_task(finish_or_cancel(task, 10))
    await settle(3)
    stopper.cancel()
    await settle()
    assert stopper.cancelled() and task.cancelled()


async def test_a_task_cancelled_by_someone_else_is_quiet_and_a_failing_one_raises() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    stopper = asyncio.create_task(finish_or_cancel(task, 10))
    await settle(3)
    task.cancel()
    await settle()
    assert stopper.done() and not stopper.cancelled() and stopper.exception() is None

    async def fails() -> None:
        raise OSError("broken pipe")

    with pytest.raises(OSError, match="broken pipe"):
        await finish_or_cancel(asyncio.create_task(fails()), 10)
