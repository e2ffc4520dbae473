"""Cancel-safe waits: the two asyncio patterns rig uses where a lost cancel would hang a close.

Why this exists: on Python 3.11 `asyncio.wait_for` returns the awaited result and drops a
cancel that lands in the same loop tick as that result (the caller's task goes on as if never
cancelled). A loop that runs "until cancelled" then runs for ever, and whoever awaits it at
close waits for ever: a rollout hung this way in CI (rig/net/pathsample.py, 6370333). rig waits
with `asyncio.timeout`, which keeps the cancel, and `asyncio.wait_for` is banned in rig/ by
ruff (TID251, pyproject.toml); docs/architecture.md, "Waiting with a timeout".
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


def raise_if_cancelling() -> None:
    """Raise CancelledError if the current task has a cancel pending that an await inside
    swallowed (third-party code, or `wait_for`): a loop calls this once a round so that it
    stops whatever the awaits it made did with the cancel."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def finish_or_cancel(task: asyncio.Task[Any], timeout_s: float) -> None:
    """Give `task` up to `timeout_s` to end by itself, then cancel it and wait until it has.

    A cancel of the caller during the wait is not swallowed: `task` is still cancelled and
    awaited (nothing runs on behind the caller's back), then the caller's CancelledError goes
    on up. `task` ending cancelled is quiet; `task` failing raises its error here.
    """
    caller = asyncio.current_task()
    cancels_before = caller.cancelling() if caller is not None else 0
    cancelled = False
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.shield(task)
    except TimeoutError:
        pass
    except asyncio.CancelledError:
        # `task` itself cancelled (shield passes that on), or the caller: the count tells
        cancelled = caller is not None and caller.cancelling() > cancels_before
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if cancelled:
        raise asyncio.CancelledError
