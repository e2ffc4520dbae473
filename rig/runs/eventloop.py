"""Which event loop a command runs on: the standard asyncio loop or uvloop (`--loop`).

Why: with one tick serving every stream (rig.sessiontick), what remains of the loop's own
cost per frame is the selector, the task switches of the receive side and `transport.write`;
uvloop (libuv, in C) does those for less CPU. It is an option (the `uvloop` extra), measured
side by side in bench/capacity.py (`--loop asyncio uvloop`, docs/pacing.md), not a default:
the standard loop is what every other asyncio program runs on, and the figures say where
uvloop pays on a given machine.

The run records what it ran on (`event_loop()`: the loop's module and version) in the
manifest's `scheduling` block, whatever was asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from importlib.metadata import version
from typing import Any, TypeVar

from rig.extras import require

T = TypeVar("T")
LOOPS: tuple[str, ...] = ("asyncio", "uvloop")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for `--loop NAME` (None: asyncio's default)."""
    if name == "asyncio":
        return None
    if name != "uvloop":
        raise ValueError(f"--loop must be one of {', '.join(LOOPS)}, got {name!r}")
    require("uvloop", "--loop uvloop")
    import uvloop

    return uvloop.new_event_loop


def run_on(name: str, coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)` on the loop `name` (asyncio.Runner: its own loop, closed after)."""
    factory = loop_factory(name)
    if factory is None:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def event_loop() -> str:
    """What the running loop is: `asyncio` or `uvloop X.Y.Z`."""
    loop = asyncio.get_running_loop()
    module = type(loop).__module__.split(".")[0]
    if module == "uvloop":
        return f"uvloop {version('uvloop')}"
    return "asyncio"
