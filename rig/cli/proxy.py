"""`rig proxy --listen HOST:PORT --upstream URL --dialect NAME`: a measuring WebSocket proxy
(docs/proxy.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from rig.errors import ConfigError
from rig.runs.relays import add_impair_option


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help="sit between a real client and a system: one run directory, a rollout per "
        "connection, response latencies split into client leg, proxy, upstream leg, system",
    )
    p.add_argument("--listen", default="127.0.0.1:8770", help="HOST:PORT (default 127.0.0.1:8770)")
    p.add_argument("--upstream", required=True, help="ws:// or wss:// URL of the system")
    p.add_argument(
        "--dialect",
        default="rig",
        help="the protocol on the wire: rig, raw, openai, grok, gemini, pipecat, moshi "
        "(default rig)",
    )
    p.add_argument(
        "--dialect-opt", action="append", metavar="K=V", help="dialect option (repeatable)"
    )
    p.add_argument(
        "--record-audio",
        action="store_true",
        help="write user.wav/system.wav/received.wav and event contents (default: timing "
        "metadata only, for privacy)",
    )
    p.add_argument(
        "--path-interval-s",
        type=float,
        default=1.0,
        help="ping/pong + TCP_INFO on both legs every S seconds (default 1)",
    )
    p.add_argument(
        "--rt-priority",
        type=int,
        default=3,
        help="SCHED_FIFO priority of the proxy's event loop (0: off; default 3, as rig run)",
    )
    add_impair_option(p)
    p.add_argument(
        "--impair-client",
        metavar="SPEC",
        help="network conditions between the client and the proxy (same syntax as --impair, "
        "which applies to the upstream leg)",
    )
    p.add_argument(
        "--mqtt",
        metavar="URL",
        help="publish live telemetry (status, chunks, responses) to an MQTT broker, as rig run "
        "does: `rig watch --mqtt URL` shows the proxied conversations (mqtt extra)",
    )
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
    from rig.dialects import get_dialect
    from rig.ids import check_id
    from rig.limits import bounded
    from rig.proxy import RecordingProxy
    from rig.redact import redact_url
    from rig.runs.config import parse_dialect_options
    from rig.runs.relays import impair_log_path, relay_for
    from rig.runs.runner import new_run_id

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
    bounded(args.path_interval_s, 0.05, 3600.0, "--path-interval-s")
    if args.mqtt:
        from rig.extras import require

        require("mqtt", "--mqtt")
    options = parse_dialect_options(args.dialect_opt)
    get_dialect(args.dialect, **options)  # unknown dialect or option: exit 2 here
    out = os.path.join(args.out, args.run_id or new_run_id())

    relay = relay_for(args.impair, args.upstream, "ws")
    client_relay = None
    if args.impair_client:
        from rig.net.impair import parse_impair
        from rig.relay.process import TcpRelay

        client_imp = parse_impair(args.impair_client)
    listen_host, listen_port = host or "127.0.0.1", int(port)

    async def main(sched: dict[str, object]) -> None:
        async with contextlib.AsyncExitStack() as stack:
            await serve(sched, stack)

    async def serve(sched: dict[str, object], stack: contextlib.AsyncExitStack) -> None:
        nonlocal client_relay
        via = None
        if relay is not None:  # between the proxy and the upstream, in its own process
            via = relay.start(impair_log_path(out))  # main thread: it dies with it
        config: dict[str, object] = {"scheduling": sched}
        if args.impair:
            config["impair_upstream"] = relay.impairment.as_dict() if relay else args.impair
        if args.impair_client:
            config["impair_client"] = client_imp.as_dict()
        proxy = RecordingProxy(
            args.upstream,
            out,
            dialect=args.dialect,
            dialect_options=options,
            record_audio=args.record_audio,
            max_message_bytes=args.max_message_bytes,
            idle_timeout_s=args.idle_timeout_s,
            connect_via=via,
            path_interval_s=args.path_interval_s,
            config=config,
        )
        if args.mqtt:
            from rig.telemetry import events as ev
            from rig.telemetry.bus import EventBus
            from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url
            from rig.telemetry.session_bridge import session_publisher

            bus = EventBus()
            proxy.publish_factory = session_publisher(
                bus, proxy.run_id, proxy.clock, target=redact_url(args.upstream)
            )
            mqtt = MqttPublisher(
                bus,
                parse_mqtt_url(args.mqtt),
                clock=proxy.clock,
                on_error=lambda line: print(f"rig proxy: {line}", file=sys.stderr, flush=True),
            )
            await stack.enter_async_context(mqtt)
            bus.publish(ev.run(proxy.run_id, proxy.clock.now_ns(), 0))
        if args.impair_client:
            # the client reaches the proxy through a relay on --listen; the proxy itself
            # listens on a private loopback port behind it
            inner = await proxy.start("127.0.0.1", 0)
            inner_port = int(inner.rsplit(":", 1)[1])
            client_relay = TcpRelay(
                "127.0.0.1",
                inner_port,
                client_imp,
                listen_host=listen_host,
                listen_port=listen_port,
            )
            log = os.path.join(out, "impair-client.jsonl")
            bound = client_relay.start(log)
            url = f"ws://{bound[0]}:{bound[1]}"
        else:
            url = await proxy.start(listen_host, listen_port)
        print(f"rig proxy listening on {url}, recording into {out}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await proxy.stop()
        for r in (relay, client_relay):
            if r is not None:
                await asyncio.to_thread(r.stop)
        counts = ", ".join(f"{k} {v}" for k, v in sorted(proxy.manifest_counts().items()))
        print(f"rig proxy: {len(proxy.results)} connections ({counts or 'none'}) in {out}")

    from rig import realtime
    from rig.cli.listen import listening

    with (
        listening(listen_host, listen_port, free=f"--listen {listen_host}:0"),
        realtime.scheduling(args.rt_priority) as sched,
        realtime.streaming(),
    ):
        asyncio.run(main(sched))
    return 0
