"""A rollout's close runs its analysis in two stretches and lets the loop's due work (other
rollouts' frames from the tick's timerfd, arrivals on their sockets, timers) run between them
(rig.session `_let_due_work_run`); a cancel meanwhile is reported, not lost."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from rig.session import _let_due_work_run

LOOPS = ["asyncio"]
try:
    import uvloop
except ImportError:  # an extra: the standard loop is tested either way
    uvloop = None
else:
    LOOPS.append("uvloop")


def _run(loop_name: str, coro_fn) -> None:  # type: ignore[no-untyped-def]
    if loop_name == "uvloop":
        assert uvloop is not None
        uvloop.run(coro_fn())
    else:
        asyncio.run(coro_fn())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_work_that_fell_due_during_a_stretch_runs_before_the_next(loop_name: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        a, b = socket.socketpair()
        a.setblocking(False)
        loop.add_reader(a.fileno(), lambda: (ran.append("reader"), a.recv(64)))
        loop.call_later(0.001, ran.append, "timer")
        b.send(b"x")  # readable from now on, like a tick's timerfd
        time.sleep(0.01)  # noqa: ASYNC251 - the first stretch: busy while the timer and reader fall due
        assert await _let_due_work_run() is False
        ran.append("second stretch")
        loop.remove_reader(a.fileno())
        a.close()
        b.close()
        assert ran.index("second stretch") == 2 and set(ran[:2]) == {"timer", "reader"}

    _run(loop_name, main)


def test_a_cancel_between_the_stretches_is_reported() -> None:
    async def main() -> None:
        async def close() -> bool:
            return await _let_due_work_run()

        task = asyncio.create_task(close())
        await asyncio.sleep(0)  # the task is inside the yield now
        task.cancel()
        assert await task is True  # the caller finishes its close, then raises

    asyncio.run(main())
