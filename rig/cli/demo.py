"""`rig demo`: built-in user turns against the embedded reference system."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rig.cli import EXIT_OK, EXIT_ROLLOUTS_FAILED
from rig.cli.common import (
    add_run_options,
    build_specs,
    check_run_options,
    require_extras,
)
from rig.cli.execute import run_specs
from rig.cli.sim import add_sim_knobs, sim_from_args
from rig.errors import ConfigError

#: rollouts at once in `rig demo`, and `rig.run`'s default (a run of its three in ~7 s)
DEMO_CONCURRENCY = 3


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="built-in scenarios against the embedded reference system")
    add_run_options(p)
    add_sim_knobs(p, with_seed=False)
    p.set_defaults(concurrency=DEMO_CONCURRENCY)


def run(args: argparse.Namespace) -> int:
    from rig.reporting.summary import print_summary

    check_run_options(args)
    if args.workers not in ("auto", 1):  # the demo's reference system runs in this process
        raise ConfigError("rig demo runs in one process: --workers is for rig run")
    from rig.scenarios import resolve
    from rig.sim.server import SimServer
    from rig.sim.thread import SimThread

    require_extras(args, "ws", "rig")
    cfg, net, reply = sim_from_args(args)
    items = resolve("builtin:demo", cfg.sample_rate)
    os.makedirs(args.out, exist_ok=True)
    from rig.runner import new_run_id

    args.run_id = args.run_id or new_run_id()
    truth = os.path.join(args.out, f"{args.run_id}.sim-truth.jsonl")
    sim = SimThread(SimServer(cfg, net, truth_log=truth, reply_audio=reply))
    url = sim.start()
    try:
        specs = build_specs(items, args, url, "ws", "rig")
        runner = run_specs(
            args,
            specs,
            {
                "command": "demo",
                "sim": cfg.as_dict(),
                "net": net.as_dict(),
                "truth_log": truth,
                "session": specs[0].session_config.as_dict() if specs[0].session_config else {},
            },
        )
    finally:
        sim.stop()
    rollouts = print_summary(runner.run_dir)
    print(f"reference system ground truth: {truth}")
    from rig.sim.truth import read_truth
    from rig.sim.versus import versus_truth

    versus = versus_truth(rollouts, read_truth(truth))
    if versus is not None:  # the rig's own numbers, checked against the system's
        print(versus.line())
    ok = all(m.get("status") == "ok" for m in rollouts)
    return EXIT_OK if ok else EXIT_ROLLOUTS_FAILED
