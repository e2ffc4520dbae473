"""Waiting in tests: for a condition, with a deadline, never for a fixed time.

A test that sleeps a fixed time and hopes the thing happened is slow when the machine is
idle and flaky when it is busy; `wait_for` (threads, subprocesses) and `until` (asyncio)
poll a condition and return its first truthy value, or fail saying what never happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    cond: Callable[[], T], *, timeout_s: float = 10.0, every_s: float = 0.02, what: str = ""
) -> T:
    """Poll `cond` until it returns something truthy (which is returned)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what or cond}")
        time.sleep(every_s)


async def until(
    cond: Callable[[], T | Awaitable[T]],
    *,
    timeout_s: float = 10.0,
    every_s: float = 0.02,
    what: str = "",
) -> T:
    """`wait_for` on the event loop: `cond` may be a plain function or a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if asyncio.iscoroutine(got) or isinstance(got, asyncio.Future):
            got = await got
        if got:
            return got  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what or cond}")
        await asyncio.sleep(every_s)


#: source files whose tasks belong to the rig's client side of a rollout
_CLIENT_FILES = ("rig/session.py", "rig/transports/", "rig/runs/", "rig/dialects/")


def client_tasks() -> list[str]:
    """Unfinished asyncio tasks started by the rig's client side (session, transports,
    runner): after a rollout ends there must be none. Servers in the same loop don't count."""
    left = []
    for task in asyncio.all_tasks():
        if task.done() or task is asyncio.current_task():
            continue
        code = getattr(task.get_coro(), "cr_code", None)
        filename = code.co_filename if code is not None else ""
        if any(part in filename for part in _CLIENT_FILES):
            left.append(f"{task.get_name()}: {code.co_qualname if code else '?'}")
    return left
