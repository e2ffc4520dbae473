"""`rig demo`: built-in user turns against the embedded reference system."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rig.cli.runopts import add_run_options, config_from_args
from rig.cli.sim import add_sim_knobs, sim_from_args
from rig.runs.config import DEMO_CONCURRENCY


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="built-in scenarios against the embedded reference system")
    add_run_options(p)
    add_sim_knobs(p, with_seed=False)
    p.set_defaults(concurrency=DEMO_CONCURRENCY)


def run(args: argparse.Namespace) -> int:
    from rig.reporting.summary import print_summary
    from rig.runs.execute import run_specs
    from rig.runs.relays import relay_for
    from rig.runs.runner import new_run_id
    from rig.runs.specs import Prepared, build_specs
    from rig.scenarios import resolve
    from rig.sim.server import SimServer
    from rig.sim.thread import SimThread
    from rig.sim.truth import read_truth
    from rig.sim.versus import versus_truth
    from rig.status import exit_verdict

    config = config_from_args(args, command="demo", scenario="builtin:demo")
    config.check()
    cfg, net, reply = sim_from_args(args)
    items = resolve(config.scenario, cfg.sample_rate)
    out = config.output.out
    os.makedirs(out, exist_ok=True)
    run_id = config.output.run_id or new_run_id()
    args.run_id = run_id  # known now, for the Ctrl-C resume hint (rig.cli.main)
    truth = os.path.join(out, f"{run_id}.sim-truth.jsonl")
    config = config.replace(
        output__run_id=run_id,
        extra={"sim": cfg.as_dict(), "net": net.as_dict(), "truth_log": truth},
    )
    sim = SimThread(SimServer(cfg, net, truth_log=truth, reply_audio=reply))
    url = sim.start()
    try:
        relay = relay_for(config.impair, url, "ws")
        specs = build_specs(items, config, url, "ws", "rig", relay)
        runner = run_specs(config, Prepared(specs, None, relay))
    finally:
        sim.stop()
    rollouts = print_summary(runner.run_dir)
    print(f"reference system ground truth: {truth}")
    versus = versus_truth(rollouts, read_truth(truth))
    if versus is not None:  # the rig's own numbers, checked against the system's
        print(versus.line())
    # the demo's exit status judges the statuses only, as it always has (CI runs `rig demo`
    # on shared machines): the same verdict, without the rig's own timing
    return exit_verdict((m.get("status") for m in rollouts), stopped=bool(runner.stop_reason))
