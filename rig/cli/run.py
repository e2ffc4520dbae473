"""`rig run SCENARIO --target URL`: play a scenario into a system and record it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from rig.cli import EXIT_OK, EXIT_ROLLOUTS_FAILED
from rig.cli.capacity import resolve_workers, run_sharded, timing_invalid_lines
from rig.cli.common import (
    add_run_options,
    build_specs,
    check_run_options,
    parse_dialect_options,
    require_extras,
    uplink_rate,
)
from rig.cli.echoopts import add_echo_options
from rig.cli.engine import add_engine_options, check_engine_options, run_engine
from rig.cli.execute import run_specs_async
from rig.cli.inputs import check_ws_target
from rig.cli.sweep import parse_sweep
from rig.errors import ConfigError
from rig.extras import BACKENDS

if TYPE_CHECKING:
    from rig.runner import RolloutSpec, Runner


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="play a scenario into a system as a live participant")
    p.add_argument("scenario", help="WAV file, scenario file (.toml/.json) or builtin:NAME")
    p.add_argument("--target", help="ws://host:port/path of the system (not for device)")
    p.add_argument(
        "--transport",
        default="ws",
        choices=["ws", "webrtc", "device"],
        help="WebSocket, WebRTC (http(s):// offer URL) or a sound card",
    )
    p.add_argument(
        "--dialect", default="rig", help="rig (default), raw, openai, grok, gemini, moshi, pipecat"
    )
    p.add_argument(
        "--dialect-opt",
        action="append",
        metavar="KEY=VALUE",
        help="dialect option, repeatable (e.g. turn_detection=manual, model=..., voice=...)",
    )
    p.add_argument(
        "--sweep",
        action="append",
        metavar="KEY=V1,V2,...",
        help="run the scenario once per value of this dialect option (repeatable: the "
        "product), each setting a labelled group; rig report compares them side by side",
    )
    p.add_argument(
        "--sample-rate",
        type=int,
        help="uplink rate for the rig dialect (16000); device rate (48000)",
    )
    g = p.add_argument_group("sound card (--transport device)")
    g.add_argument("--output", help="device the user track plays out of (name, index, API:NAME)")
    g.add_argument("--input", help="device the system is recorded from")
    g.add_argument(
        "--backend", choices=sorted(BACKENDS), default="sounddevice", help="PortAudio binding"
    )
    g.add_argument("--channels", type=int, default=1, help="channels opened on both devices")
    g.add_argument("--blocksize", type=int, default=0, help="frames per callback (0: auto)")
    g.add_argument("--latency", default="high", help="PortAudio latency: low, high or seconds")
    g.add_argument("--duplex", action="store_true", help="one full-duplex stream")
    g.add_argument(
        "--calibration",
        default="auto",
        help="auto (stored for this exact path), none, or a calibration JSON file",
    )
    p.add_argument(
        "--condition",
        action="append",
        metavar="KEY=VALUE,...",
        help="an input condition for every turn of the run (under each item's and step's own): "
        "target_rms_dbfs=-35 | target_peak_dbfs=-1 | target_lufs=-23 | gain_db=-6, "
        "noise.kind=pink,noise.snr_db=5 (white, pink, babble; or noise.file=F), line=phone, "
        "line.kind=lossy,line.loss=0.05[,line.conceal=repeat] (docs/scenarios.md)",
    )
    p.add_argument(
        "--otel",
        action="store_true",
        help="after the run, export each rollout as an OpenTelemetry trace over OTLP/HTTP to "
        "$OTEL_EXPORTER_OTLP_ENDPOINT (the otel extra; as rig report --otel)",
    )
    add_run_options(p)
    add_echo_options(p)
    g = p.add_argument_group("scale-out (docs/scale-out.md)")
    g.add_argument(
        "--shard",
        metavar="K/N",
        help="run only slice K (from 0) of N of the rollouts, chosen by a hash of the rollout "
        "id, into the run directory <run-id>-shard-K-of-N; combine slices with rig merge",
    )
    g.add_argument("--node-id", help=argparse.SUPPRESS)  # set by an engine: metrics.json node
    g.add_argument("--fleet-feed", help=argparse.SUPPRESS)  # set by an engine: HOST:PORT
    add_engine_options(g)


def prepare(args: argparse.Namespace) -> tuple[list[RolloutSpec], dict[str, Any]]:
    """Check the options, resolve the scenario and build the rollouts (before any file is
    written): the CLI and the Python API (rig.api) both start here."""
    check_run_options(args)
    check_engine_options(args)
    if args.shard is not None:
        from rig.ids import check_id
        from rig.runner import new_run_id
        from rig.shard import parse_shard

        shard = parse_shard(args.shard)
        args.run_id = check_id(f"{args.run_id or new_run_id()}-{shard.dir_suffix}", "--run-id")
    from rig.scenarios import resolve

    require_extras(args, args.transport, args.dialect)
    if getattr(args, "otel", False):
        otel_endpoint()  # checked before anything streams
    if args.transport == "device":
        rate = args.sample_rate or 48_000
    else:
        if not args.target:
            raise ConfigError(f"--transport {args.transport} needs --target URL")
        if args.transport == "ws":
            check_ws_target(args.target)
        if args.transport == "webrtc":
            rate = args.sample_rate or 48_000  # Opus runs at 48 kHz: no resampling on the way
        else:
            rate = uplink_rate(
                args.dialect, args.sample_rate, parse_dialect_options(args.dialect_opt)
            )
    items = resolve(args.scenario, rate)
    from rig.conditions import apply_conditions, parse_cli

    run_condition = parse_cli(getattr(args, "condition", None))
    apply_conditions(items, run_condition, args.seed)  # rendered before anything streams
    specs = build_specs(items, args, args.target, args.transport, args.dialect)
    config = {
        "command": "run",
        "scenario": args.scenario,
        "transport": args.transport,
        "dialect": args.dialect,
        "dialect_options": parse_dialect_options(args.dialect_opt),
        "sweep": parse_sweep(args.sweep),
        "condition": run_condition.as_dict() if run_condition is not None else None,
        "sample_rate": rate,
        "session": specs[0].session_config.as_dict() if specs and specs[0].session_config else {},
    }
    return specs, config


def dispatched(args: argparse.Namespace) -> bool:
    """Does this run go to other processes or machines (--engine, an explicit --workers N)?
    (`--workers auto` in `rig.run_async` is this process: it runs on the caller's loop.)"""
    explicit = args.workers not in ("auto", 1)
    return args.engine != "local" or (explicit and args.worker_index is None)


async def run_async(args: argparse.Namespace) -> Runner:
    """`rig run` inside a running event loop: what `rig.run_async` awaits."""
    import asyncio

    if dispatched(args):
        raise ConfigError(
            "rig.run_async runs in this process: --engine/--workers runs go through the "
            "command line for now (rig run ...; then rig.RunResult.from_dir(run_dir))"
        )
    # scenario files, WAV decoding and device checks block: not on the caller's loop
    specs, config = await asyncio.to_thread(prepare, args)
    return await _execute(args, specs, config)


async def _execute(
    args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]
) -> Runner:
    """The run, then (with --otel) its traces, exported off the loop after the last rollout."""
    import asyncio

    runner = await run_specs_async(args, specs, config)
    if getattr(args, "otel", False):
        from rig.reporting.otel import export_run

        n = await asyncio.to_thread(export_run, runner.run_dir)
        print(f"rig run: exported {n} spans to {otel_endpoint()} (OTLP/HTTP)", file=sys.stderr)
    return runner


def otel_endpoint() -> str:
    """The OTLP endpoint from the standard variables (redacted), or a usage error."""
    import os

    from rig.extras import require
    from rig.redact import redact_url

    require("otel", "--otel")
    endpoint = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    if not endpoint:
        raise ConfigError("--otel needs OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318)")
    return redact_url(endpoint)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from rig.reporting.summary import print_summary
    from rig.reporting.why import exit_line
    from rig.runner import new_run_id

    if args.worker_index is None and args.engine == "local":  # known now, for a Ctrl-C hint
        args.run_id = args.run_id or new_run_id()
    specs, config = prepare(args)
    if args.engine != "local":  # the shards rebuild these; the driver needs only the ids
        return run_engine(args, [s.rollout_id for s in specs])
    n = resolve_workers(args, len(specs))
    if n > 1:
        return run_sharded(args, [s.rollout_id for s in specs], n)
    runner = asyncio.run(_execute(args, specs, config))
    if args.worker_index is not None:  # the parent prints the summary of the whole run
        mine = runner.results.values()
        ok = not runner.stop_reason and all(m.get("status") == "ok" for m in mine)
        return (
            EXIT_OK
            if ok and all(m.get("timing_valid") is not False for m in mine)
            else (EXIT_ROLLOUTS_FAILED)
        )
    rollouts = print_summary(runner.run_dir)
    if runner.stop_reason:
        print(
            f"rig run: stopped early: {runner.stop_reason}; free space and run again with "
            f"--run-id {runner.run_id} to resume",
            file=sys.stderr,
        )
        code = EXIT_ROLLOUTS_FAILED
    else:
        ok = all(m.get("status") == "ok" for m in rollouts)
        invalid = timing_invalid_lines(rollouts)
        for line in invalid:
            print(line, file=sys.stderr)
        code = EXIT_OK if ok and not invalid else EXIT_ROLLOUTS_FAILED
    print(f"rig run: {exit_line(code, rollouts, stop_reason=runner.stop_reason)}", file=sys.stderr)
    return code
