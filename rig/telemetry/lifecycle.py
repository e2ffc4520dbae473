"""`async with x:` for the bus's consumers: `x.start()` on entry, `await x.stop()` on exit.

Why: the MQTT publisher, the view feed, the view process, the dashboard, the fleet uplink
and the device clock probe each start a task (a process, a thread, a connection) over the bus
and stop it; they wrote the same two methods six times.
"""

from __future__ import annotations

import inspect
from types import TracebackType
from typing import Any, Self


class StartStop:
    """Mixin: `start()` (awaited when it returns an awaitable) and `stop()` as a context."""

    def start(self) -> Any:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        started = self.start()
        if inspect.isawaitable(started):
            await started
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
