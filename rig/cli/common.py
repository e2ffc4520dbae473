"""Pieces shared by `rig run` and `rig demo`: building rollouts and running them."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from rig.clock.base import Clock
from rig.dialects import get_dialect
from rig.errors import ConfigError
from rig.runner import RolloutSpec, Runner
from rig.scenarios import ScenarioItem
from rig.session import SessionConfig
from rig.transports.base import Transport
from rig.transports.websocket import WebSocketTransport, redact_url


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="recordings", help="output folder (default: recordings/)")
    p.add_argument("--run-id", help="run directory name (reuse one to resume)")
    p.add_argument("--headless", action="store_true", help="plain progress lines, no live view")
    p.add_argument("--concurrency", type=int, default=1, help="rollouts at once")
    p.add_argument("--connect-concurrency", type=int, default=8, help="simultaneous connects")
    p.add_argument("--repeat", type=int, default=1, help="run every item N times")
    p.add_argument("--frame-ms", type=float, default=20.0, help="uplink frame")
    p.add_argument(
        "--drain-quiet-s",
        type=float,
        default=1.5,
        help="after the plan, stop once the system was quiet this long (playback)",
    )
    p.add_argument("--max-s", type=float, default=120.0, help="hard cap per rollout")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--probe-interval-s",
        type=float,
        default=0.0,
        help="clock probes every N s (peers that answer them)",
    )


def session_config(
    args: argparse.Namespace, overrides: dict[str, Any] | None = None
) -> SessionConfig:
    base = dict(
        frame_ms=args.frame_ms,
        drain_quiet_s=args.drain_quiet_s,
        max_s=args.max_s,
        probe_interval_s=args.probe_interval_s,
    )
    base.update(overrides or {})
    return SessionConfig(**base)


def ws_factory(url: str, dialect: str, sample_rate: int, options: dict[str, Any]) -> Any:
    def make(clock: Clock, gate: asyncio.Semaphore) -> Transport:
        d = get_dialect(
            dialect,
            **({"sample_rate": sample_rate} if dialect in ("rig", "raw") else {}),
            **options,
        )
        return WebSocketTransport(url, d, clock, open_gate=gate)

    return make


def uplink_rate(dialect: str, requested: int | None) -> int:
    if dialect in ("rig", "raw"):
        return requested or 16_000
    d = get_dialect(dialect)
    return d.uplink_rate


def build_specs(
    items: list[ScenarioItem],
    args: argparse.Namespace,
    target_url: str,
    transport: str,
    dialect: str,
) -> list[RolloutSpec]:
    if transport != "ws":
        raise ConfigError(f"transport {transport!r} is not available in this build")
    specs = []
    for rep in range(max(1, args.repeat)):
        for item in items:
            rid = item.item_id if args.repeat <= 1 else f"{item.item_id}-r{rep}"
            specs.append(
                RolloutSpec(
                    rid,
                    item.plan,
                    ws_factory(target_url, dialect, item.plan.sample_rate, {}),
                    {"url": redact_url(target_url), "transport": transport, "dialect": dialect},
                    {**item.meta, "repeat": rep},
                    session_config(args, item.session),
                )
            )
    return specs


def run_specs(args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]) -> Runner:
    runner = Runner(
        args.out,
        run_id=args.run_id,
        concurrency=args.concurrency,
        connect_concurrency=args.connect_concurrency,
        seed=args.seed,
        config=config,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    asyncio.run(runner.run(specs))
    return runner
