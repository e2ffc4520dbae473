"""`rig proxy --listen HOST:PORT --upstream URL`: a recording WebSocket proxy."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from rig.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy", help="sit between a client and a system, stamping and logging every message"
    )
    p.add_argument("--listen", default="127.0.0.1:8770", help="HOST:PORT (default 127.0.0.1:8770)")
    p.add_argument("--upstream", required=True, help="ws:// or wss:// URL of the system")
    p.add_argument("--out", default="recordings", help="output folder (default: recordings/)")
    p.add_argument("--run-id", help="run directory name")


def run(args: argparse.Namespace) -> int:
    from rig.proxy import RecordingProxy
    from rig.runner import new_run_id

    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--listen wants HOST:PORT, got {args.listen!r}")
    if not args.upstream.startswith(("ws://", "wss://")):
        raise ConfigError(f"--upstream must be a ws:// or wss:// URL, got {args.upstream!r}")
    out = os.path.join(args.out, args.run_id or new_run_id())

    async def main() -> None:
        proxy = RecordingProxy(args.upstream, out)
        url = await proxy.start(host or "127.0.0.1", int(port))
        print(f"rig proxy listening on {url}, recording into {out}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await proxy.stop()

    asyncio.run(main())
    return 0
