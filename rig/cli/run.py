"""`rig run SCENARIO --target URL`: play a scenario into a system and record it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rig.cli import EXIT_OK, EXIT_ROLLOUTS_FAILED
from rig.cli.capacity import run_sharded, timing_invalid_lines
from rig.cli.common import (
    add_run_options,
    build_specs,
    check_run_options,
    parse_dialect_options,
    require_extras,
    run_specs,
    uplink_rate,
)
from rig.cli.engine import add_engine_options, check_engine_options, run_engine
from rig.cli.sweep import parse_sweep
from rig.errors import ConfigError
from rig.extras import BACKENDS


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="play a scenario into a system as a live participant")
    p.add_argument("scenario", help="WAV file, scenario file (.toml/.json) or builtin:NAME")
    p.add_argument("--target", help="ws://host:port/path of the system (not for device)")
    p.add_argument("--transport", default="ws", choices=["ws", "webrtc", "device"])
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
    g.add_argument("--backend", choices=sorted(BACKENDS), default="sounddevice")
    g.add_argument("--channels", type=int, default=1, help="channels opened on both devices")
    g.add_argument("--blocksize", type=int, default=0, help="frames per callback (0: auto)")
    g.add_argument("--latency", default="high", help="PortAudio latency: low, high or seconds")
    g.add_argument("--duplex", action="store_true", help="one full-duplex stream")
    g.add_argument(
        "--calibration",
        default="auto",
        help="auto (stored for this exact path), none, or a calibration JSON file",
    )
    add_run_options(p)
    g = p.add_argument_group("scale-out (docs/scale-out.md)")
    g.add_argument(
        "--shard",
        metavar="K/N",
        help="run only slice K (from 0) of N of the rollouts, chosen by a hash of the rollout "
        "id, into the run directory <run-id>-shard-K-of-N; combine slices with rig merge",
    )
    g.add_argument("--node-id", help=argparse.SUPPRESS)  # set by an engine: metrics.json node
    add_engine_options(g)


def run(args: argparse.Namespace) -> int:
    from rig.reporting.summary import print_summary

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
    if args.transport == "device":
        rate = args.sample_rate or 48_000
    else:
        if not args.target:
            raise ConfigError(f"--transport {args.transport} needs --target URL")
        if args.transport == "webrtc":
            rate = args.sample_rate or 48_000  # Opus runs at 48 kHz: no resampling on the way
        else:
            rate = uplink_rate(
                args.dialect, args.sample_rate, parse_dialect_options(args.dialect_opt)
            )
    items = resolve(args.scenario, rate)
    specs = build_specs(items, args, args.target, args.transport, args.dialect)
    if args.engine != "local":  # the shards rebuild these; the driver needs only the ids
        return run_engine(args, [s.rollout_id for s in specs])
    if args.workers > 1 and args.worker_index is None:
        return run_sharded(args, len(specs))
    runner = run_specs(
        args,
        specs,
        {
            "command": "run",
            "scenario": args.scenario,
            "transport": args.transport,
            "dialect": args.dialect,
            "dialect_options": parse_dialect_options(args.dialect_opt),
            "sweep": parse_sweep(args.sweep),
            "sample_rate": rate,
            "session": specs[0].session_config.as_dict()
            if specs and specs[0].session_config
            else {},
        },
    )
    rollouts = print_summary(runner.run_dir)
    if runner.stop_reason:
        print(
            f"rig run: stopped early: {runner.stop_reason}; free space and run again with "
            f"--run-id {runner.run_id} to resume",
            file=sys.stderr,
        )
        return EXIT_ROLLOUTS_FAILED
    ok = all(m.get("status") == "ok" for m in rollouts)
    invalid = timing_invalid_lines(rollouts)
    for line in invalid:
        print(line, file=sys.stderr)
    return EXIT_OK if ok and not invalid else EXIT_ROLLOUTS_FAILED
