"""The live view in its own process: started before the run streams, fed by a `ViewFeed`.

How this works: `ViewProcess.start()` makes a SOCK_SEQPACKET socket pair, starts
`python -m rig.dashboard.viewer --fd N` on the same terminal (stdin/stdout/stderr inherited,
normal scheduling: it is started before the loop asks for SCHED_FIFO, and the loop's policy
resets on fork anyway) and waits until the view says it can draw, so its imports and its first
frame never overlap the streams. All formatting, diffing and drawing happen there; this side
only feeds the socket. `q` in the view ends the view, not the run: the feed sees EOF and
stops, and `closed` tells the caller to print plain progress lines instead. `stop()` sends the
last frame, closes the socket (the view draws its final frame and exits) and waits for it.

Nothing here imports rich or rig.dashboard: the audio process never loads the renderer.
"""

from __future__ import annotations

import asyncio
import asyncio.subprocess
import contextlib
import os
import sys
from collections.abc import Sequence

from rig.clock.base import Clock
from rig.telemetry.bus import EventBus
from rig.telemetry.lifecycle import StartStop
from rig.telemetry.viewfeed import ViewFeed, socket_pair

VIEWER_MODULE = "rig.dashboard.viewer"
VIEW_CLOSED = (
    "rig: live view closed; the run goes on (plain progress lines follow, Ctrl-C stops it)"
)


async def closed_by_user(view: ViewProcess) -> bool:
    """Wait until the view is gone; True if the user closed it (`q`), not the run (stop())
    nor Ctrl-C (the view exits 130: the run is stopping too, nothing to announce)."""
    assert view.feed is not None
    await view.feed.closed.wait()
    proc = view.proc
    if proc is not None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                if await proc.wait() == 130:
                    return False
    return True


class ViewProcess(StartStop):
    """`async with ViewProcess(bus) as view:` ... `view.alive` while the view is up."""

    def __init__(
        self,
        bus: EventBus,
        *,
        detail: str | None = None,
        refresh_hz: float = 4.0,
        python: str | None = None,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 15.0,
        stop_timeout_s: float = 5.0,
        feed_mode: str = "put",
        clock: Clock | None = None,
    ) -> None:
        self.bus = bus
        self.detail = detail
        self.refresh_hz = refresh_hz
        self.python = python or sys.executable
        self.extra_args = list(extra_args)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.feed_mode = feed_mode
        self.clock = clock
        self.feed: ViewFeed | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.error: str | None = None

    @property
    def alive(self) -> bool:
        """The view is up and reading (False once it quit, crashed or never started)."""
        return self.feed is not None and self.feed.alive and self.feed.ready.is_set()

    async def start(self) -> bool:
        """Start the view and wait until it draws; False (with `error`) if it could not."""
        ours, theirs = socket_pair()
        # -P: the rig this process runs, never a rig/ folder in the current directory
        argv = [self.python, "-P", "-m", VIEWER_MODULE, "--fd", str(theirs.fileno())]
        argv += ["--refresh-hz", str(self.refresh_hz)]
        if self.detail:
            argv += ["--detail", self.detail]
        argv += self.extra_args
        # the terminal's own size, not a COLUMNS/LINES exported when it had another one: rich
        # would take those over the tty's size and never follow a resize
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(theirs.fileno(),), close_fds=True, env=env
            )
        except OSError as exc:
            ours.close()
            self.error = f"live view did not start: {exc}"
            return False
        finally:
            theirs.close()
        self.feed = ViewFeed(
            self.bus, ours, flush_hz=self.refresh_hz, mode=self.feed_mode, clock=self.clock
        )
        self.feed.start()
        ready = asyncio.ensure_future(self.feed.ready.wait())
        gone = asyncio.ensure_future(self.feed.closed.wait())
        try:
            await asyncio.wait(
                {ready, gone}, timeout=self.start_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ready.cancel()
            gone.cancel()
        if not self.feed.ready.is_set():
            self.error = "live view did not start" + (
                " (it exited)" if self.feed.closed.is_set() else " in time"
            )
            await self.stop()
            return False
        return True

    async def stop(self) -> None:
        """Last frame, EOF, then wait for the view to draw its final frame and exit."""
        if self.feed is not None:
            await self.feed.stop()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            async with asyncio.timeout(self.stop_timeout_s):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                async with asyncio.timeout(2.0):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid
