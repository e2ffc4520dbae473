"""`rig watch --mqtt URL`: the live dashboard of a run published on an MQTT broker.

Runs in its own process: subscribes to `rig/<run|+>/+/+`, feeds a local bus, and renders the
same dashboard `rig run` shows (headless lines when stdout is not a terminal or with
`--headless`). Exits on q, Ctrl-C, `--duration`, or with `--exit-when-done` once every rollout
it has seen is done.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

from rig.errors import ConfigError, TransportError
from rig.extras import require


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("watch", help="live dashboard of a run, from an MQTT broker")
    p.add_argument(
        "--mqtt",
        metavar="URL",
        help="broker: mqtt://[user[:pass]@]host[:port] or mqtts://... "
        "(password also from RIG_MQTT_PASSWORD)",
    )
    p.add_argument("--run", metavar="ID", help="only this run (default: every run)")
    p.add_argument("--detail", metavar="ROLLOUT", help="rollout shown in the detail panel")
    p.add_argument("--headless", action="store_true", help="plain progress lines")
    p.add_argument("--refresh-hz", type=float, default=4.0, help="snapshot rate (default 4)")
    p.add_argument(
        "--summary-every",
        type=float,
        default=10.0,
        metavar="S",
        help="without the live view: a summary line every S seconds",
    )
    p.add_argument("--duration", type=float, metavar="S", help="exit after S seconds")
    p.add_argument(
        "--exit-when-done", action="store_true", help="exit once every rollout seen is done"
    )


def run(args: argparse.Namespace) -> int:
    if not args.mqtt:
        raise ConfigError(
            "rig watch needs --mqtt URL; `rig run` and `rig demo` show the same view themselves"
        )
    if args.refresh_hz <= 0:
        raise ConfigError("--refresh-hz must be positive")
    require("mqtt", "rig watch")
    from rig.telemetry.mqtt import parse_mqtt_url

    config = parse_mqtt_url(args.mqtt)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_watch(args, config))
    return 130


async def _watch(args: argparse.Namespace, config: Any) -> int:
    from rich.console import Console

    from rig.dashboard.live import Dashboard
    from rig.telemetry.bus import EventBus
    from rig.telemetry.mqtt import MqttSubscriber

    bus = EventBus()
    console = Console()
    dash: Dashboard | None = None

    def outage(line: str) -> None:  # in the live view's footer, else on stderr
        if dash is not None and not dash.headless:
            dash.view.message = line
        else:
            print(f"rig watch: {line}", file=sys.stderr, flush=True)

    subscriber = MqttSubscriber(bus, config, run_id=args.run, on_error=outage)
    dash = Dashboard(
        bus,
        console=console,
        headless=True if args.headless else None,
        refresh_hz=args.refresh_hz,
        detail=args.detail,
        summary_every_s=args.summary_every,
    )
    if dash.headless:
        console.print(f"rig watch: {config.redacted()} run={args.run or '*'}", highlight=False)
    async with dash:
        sub_task = asyncio.create_task(subscriber.run(), name="mqtt-subscriber")
        announce = asyncio.create_task(_announce(subscriber, console, config, dash.headless))
        waits: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(dash.quit.wait()),
            sub_task,
        ]
        if args.duration is not None:
            waits.append(asyncio.ensure_future(asyncio.sleep(args.duration)))
        if args.exit_when_done:
            waits.append(asyncio.ensure_future(_all_done(dash)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waits.append(announce)
            for w in waits:
                w.cancel()
            for w in waits:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await w
    # the subscriber retries broker errors forever: if it ended, something else broke it,
    # and that must not pass for a clean exit
    failure = None if sub_task.cancelled() or not sub_task.done() else sub_task.exception()
    if isinstance(failure, OSError):  # e.g. a TLS cafile that cannot be read
        raise TransportError(
            f"the MQTT subscriber stopped: {type(failure).__name__}: {failure}"
        ) from failure
    if failure is not None:
        raise failure
    if subscriber.stats.connects == 0:  # nothing was shown because nothing could be
        raise TransportError(
            f"never reached the MQTT broker at {config.redacted()}: "
            f"{subscriber.stats.last_error or 'no answer'}"
        )
    return 0


async def _announce(subscriber: Any, console: Any, config: Any, headless: bool) -> None:
    await subscriber.connected.wait()
    if headless:
        console.print(f"rig watch: subscribed to {config.redacted()}", highlight=False)


async def _all_done(dash: Any) -> None:
    while True:
        await asyncio.sleep(0.1)
        snap = dash.snapshot
        # rollouts that reported a lifecycle (a device clock's pseudo-rollout only sends
        # clock events and stays "pending": it has no end to wait for)
        live = [r for r in snap.rollouts if r.state != "pending"]
        if live and all(r.state == "done" for r in live):
            return
