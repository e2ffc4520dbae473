"""`rig run SCENARIO --target URL`: play a scenario into a system and record it."""

from __future__ import annotations

import argparse
from typing import Any

from rig.cli.common import add_run_options, build_specs, run_specs, uplink_rate
from rig.scenarios import resolve
from rig.summary import print_summary


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="play a scenario into a system as a live participant")
    p.add_argument("scenario", help="WAV file, scenario file (.toml/.json) or builtin:NAME")
    p.add_argument("--target", required=True, help="ws://host:port/path of the system")
    p.add_argument("--transport", default="ws", choices=["ws", "webrtc", "device"])
    p.add_argument(
        "--dialect", default="rig", help="rig (default), raw, openai, grok, gemini, moshi, pipecat"
    )
    p.add_argument("--sample-rate", type=int, help="uplink rate for the rig dialect (16000)")
    add_run_options(p)


def run(args: argparse.Namespace) -> int:
    rate = uplink_rate(args.dialect, args.sample_rate)
    items = resolve(args.scenario, rate)
    specs = build_specs(items, args, args.target, args.transport, args.dialect)
    runner = run_specs(
        args,
        specs,
        {
            "command": "run",
            "scenario": args.scenario,
            "transport": args.transport,
            "dialect": args.dialect,
            "sample_rate": rate,
            "session": specs[0].session_config.as_dict()
            if specs and specs[0].session_config
            else {},
        },
    )
    rollouts = print_summary(runner.run_dir)
    return 0 if all(m.get("status") == "ok" for m in rollouts) else 3
