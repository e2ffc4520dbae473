"""`rig proxy --listen HOST:PORT --upstream URL`: a recording WebSocket proxy."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from rig.cli.netopts import add_impair_option
from rig.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy", help="sit between a client and a system, stamping and logging every message"
    )
    p.add_argument("--listen", default="127.0.0.1:8770", help="HOST:PORT (default 127.0.0.1:8770)")
    p.add_argument("--upstream", required=True, help="ws:// or wss:// URL of the system")
    add_impair_option(p)
    p.add_argument("--out", default="recordings", help="output folder (default: recordings/)")
    p.add_argument("--run-id", help="run directory name")
    p.add_argument(
        "--max-message-bytes",
        type=int,
        default=16 << 20,
        help="close a connection (1009) on a bigger message (default 16 MiB)",
    )
    p.add_argument(
        "--idle-timeout-s",
        type=float,
        default=300.0,
        help="close a connection (1001) after this long without a message (default 300)",
    )


def run(args: argparse.Namespace) -> int:
    from rig.cli.netopts import impair_log_path, relay_for
    from rig.ids import check_id
    from rig.limits import bounded
    from rig.proxy import RecordingProxy
    from rig.redact import redact_url
    from rig.runner import new_run_id

    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--listen wants HOST:PORT, got {args.listen!r}")
    if not args.upstream.startswith(("ws://", "wss://")):
        raise ConfigError(
            f"--upstream must be a ws:// or wss:// URL, got {redact_url(args.upstream)!r}"
        )
    if not 1024 <= args.max_message_bytes <= 1 << 30:
        raise ConfigError("--max-message-bytes must be between 1 KiB and 1 GiB")
    bounded(args.idle_timeout_s, 0.1, 86_400.0, "--idle-timeout-s")
    if args.run_id is not None:
        check_id(args.run_id, "--run-id")
    out = os.path.join(args.out, args.run_id or new_run_id())

    relay = relay_for(args, args.upstream, "ws")

    async def main() -> None:
        via = None
        if relay is not None:  # between the proxy and the upstream, in its own process
            via = relay.start(impair_log_path(out))  # main thread: it dies with it
        proxy = RecordingProxy(
            args.upstream,
            out,
            max_message_bytes=args.max_message_bytes,
            idle_timeout_s=args.idle_timeout_s,
            connect_via=via,
        )
        url = await proxy.start(host or "127.0.0.1", int(port))
        print(f"rig proxy listening on {url}, recording into {out}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await proxy.stop()
        if relay is not None:
            await asyncio.to_thread(relay.stop)

    asyncio.run(main())
    return 0
