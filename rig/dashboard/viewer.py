"""The live view's own process: `python -m rig.dashboard.viewer --fd N`.

How this works: `rig run` / `rig demo` (rig/telemetry/viewproc.py) start this module on their
terminal with one end of a SOCK_SEQPACKET socket pair as fd N. It reads the feed's messages
(versioned JSON payloads, one per line) with `loop.add_reader`, puts them on a local bus and
runs the same `Dashboard` as `rig watch`: reducer, snapshots, rich Live, keys. All the
formatting and drawing cost lands here, at normal scheduling priority, never in the process
that streams. It says "ready" once the Live view is up, draws a final frame and exits on EOF
(the run is over), and on `q` it restores the terminal and exits; the run goes on.
`--replay FILE` reads a recorded stream (the same lines) instead of a socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from rig.dashboard.live import Dashboard
from rig.telemetry.bus import EventBus
from rig.telemetry.viewfeed import READY, FrameReader

RECV_BYTES = 1 << 20


def normal_scheduling() -> None:
    """The view never competes with the audio loop at real-time priority."""
    if hasattr(os, "sched_setscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


async def run_view(
    sock: socket.socket | None,
    *,
    console: Console | None = None,
    detail: str | None = None,
    refresh_hz: float = 4.0,
    keys: bool | None = None,
    replay: str | None = None,
    pump: bool = True,
    dashboard_kw: dict[str, Any] | None = None,
) -> Dashboard:
    """Draw the feed on `sock` (or the `replay` file) until EOF or `q`. Returns the dashboard
    (its last snapshot), so tests can drive it with a capture console. `pump=False`: no
    periodic snapshots, only the final one at EOF (a replay on a fixed clock)."""
    bus = EventBus()
    reader = FrameReader(bus)
    eof = asyncio.Event()
    dash = Dashboard(
        bus,
        console=console or Console(stderr=True),
        headless=False,
        detail=detail,
        refresh_hz=refresh_hz,
        keys=keys,
        **(dashboard_kw or {}),
    )
    loop = asyncio.get_running_loop()

    def on_readable() -> None:
        assert sock is not None
        try:
            data = sock.recv(RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(sock.fileno())
            eof.set()
            return
        reader.feed(data)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, dash.quit.set)
        loop.add_signal_handler(signal.SIGHUP, dash.quit.set)
    dash.start(pump=pump)
    try:
        if sock is not None:
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), on_readable)
            with contextlib.suppress(OSError):
                sock.send(READY)
        if replay is not None:
            with open(replay, "rb") as f:  # noqa: ASYNC230 - a test/replay file, no audio here
                reader.feed(f.read())
            eof.set()
        done = [asyncio.ensure_future(dash.quit.wait()), asyncio.ensure_future(eof.wait())]
        try:
            await asyncio.wait(done, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for d in done:
                d.cancel()
            if sock is not None and not eof.is_set():
                with contextlib.suppress(Exception):
                    loop.remove_reader(sock.fileno())
    finally:
        await dash.stop()
    if sock is not None:
        sock.close()  # the feed sees EOF: the view is gone, the run goes on
    return dash


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rig.dashboard.viewer", description=__doc__)
    p.add_argument("--fd", type=int, help="the feed's socket (inherited)")
    p.add_argument("--replay", help="a recorded telemetry stream (one JSON payload per line)")
    p.add_argument("--detail", help="rollout shown in the detail panel")
    p.add_argument("--refresh-hz", type=float, default=4.0)
    args = p.parse_args(argv)
    if args.fd is None and args.replay is None:
        p.error("give --fd N or --replay FILE")
    normal_scheduling()
    sock = socket.socket(fileno=args.fd) if args.fd is not None else None
    try:
        asyncio.run(
            run_view(sock, detail=args.detail, refresh_hz=args.refresh_hz, replay=args.replay)
        )
    except KeyboardInterrupt:  # Ctrl-C stops the run (the parent gets it too); exit quietly
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
