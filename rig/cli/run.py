"""`rig run SCENARIO --target URL`: play a scenario into a system and record it.

A client of the library: the options become a RunConfig (rig.cli.runopts), rig.runs runs
it, and this prints the summary and turns the rollouts into the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rig.cli.echoopts import add_echo_options
from rig.cli.inputs import check_ws_target
from rig.cli.runopts import add_engine_options, add_run_options, config_from_args
from rig.extras import BACKENDS
from rig.runs.config import default


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="play a scenario into a system as a live participant")
    p.add_argument("scenario", help="WAV file, scenario file (.toml/.json) or builtin:NAME")
    p.add_argument("--target", help="ws://host:port/path of the system (not for device)")
    p.add_argument(
        "--transport",
        default=default("transport"),
        choices=["ws", "webrtc", "device"],
        help="WebSocket, WebRTC (http(s):// offer URL) or a sound card",
    )
    p.add_argument(
        "--dialect",
        default=default("dialect"),
        help="rig (default), raw, openai, grok, gemini, moshi, pipecat",
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
        "--backend", choices=sorted(BACKENDS), default=default("backend"), help="PortAudio binding"
    )
    g.add_argument(
        "--channels", type=int, default=default("channels"), help="channels opened on both devices"
    )
    g.add_argument(
        "--blocksize", type=int, default=default("blocksize"), help="frames per callback (0: auto)"
    )
    g.add_argument(
        "--latency", default=default("latency"), help="PortAudio latency: low, high or seconds"
    )
    g.add_argument("--duplex", action="store_true", help="one full-duplex stream")
    g.add_argument(
        "--calibration",
        default=default("calibration"),
        help="auto (stored for this exact path), none, or a calibration JSON file",
    )
    p.add_argument(
        "--condition",
        action="append",
        default=default("condition"),
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
    add_engine_options(g)


def run(args: argparse.Namespace) -> int:
    from rig.reporting.summary import print_summary
    from rig.reporting.why import exit_line
    from rig.rtbudget import throttle_line
    from rig.runs import launch
    from rig.runs.hostreport import host_watch_line
    from rig.runs.runner import new_run_id
    from rig.runs.sharded import timing_invalid_lines

    if args.transport == "ws" and args.target:
        check_ws_target(args.target)  # a wrong URL: one line, before anything is written
    if args.engine == "local" and args.shard is None:  # known now, for a Ctrl-C resume hint
        args.run_id = args.run_id or new_run_id()
    outcome = launch.run(config_from_args(args))
    rollouts = print_summary(outcome.run_dir)
    code = outcome.exit_code(rollouts)
    if outcome.failed_codes or outcome.where == "engine":
        return code
    if outcome.stop_reason:
        resume = (
            f"; free space and run again with --run-id {outcome.run_id} to resume"
            if outcome.where == "here"
            else ""
        )
        print(f"rig run: stopped early: {outcome.stop_reason}{resume}", file=sys.stderr)
    else:
        for line in timing_invalid_lines(rollouts, outcome.host):
            print(line, file=sys.stderr)
        budget = throttle_line(_manifest_scheduling(outcome.run_dir), rollouts)
        if budget:
            print(f"rig run: {budget}", file=sys.stderr)
    if outcome.host_summary is not None:
        print(f"rig run: {host_watch_line(outcome.host_summary, outcome.host)}", file=sys.stderr)
    expected = outcome.planned if outcome.where == "workers" else 0
    line = exit_line(code, rollouts, stop_reason=outcome.stop_reason, expected=expected)
    print(f"rig run: {line}", file=sys.stderr)
    return code


def _manifest_scheduling(run_dir: str) -> Any:
    """The run manifest's `scheduling` (a dict, or the workers' list); None if unreadable."""
    from rig.recordings.rundir import read_json

    try:
        manifest = read_json(os.path.join(run_dir, "manifest.json"))
    except (OSError, ValueError):
        return None
    return manifest.get("scheduling") if isinstance(manifest, dict) else None
