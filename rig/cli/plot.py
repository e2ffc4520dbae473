"""`rig plot ROLLOUT_DIR [-o PNG] [--labels FILE]`: timeline picture of one rollout;
`rig plot RUN_DIR [-o PNG]`: the run's response latency CDF per scenario."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plot",
        help="timeline picture of one rollout, or the latency CDF of a run",
        description="ROLLOUT_DIR: draw both tracks, speech activity, turn boundaries, "
        "injections and response latencies of one rollout on one time axis (PNG). RUN_DIR "
        "(holding rollouts/): the empirical CDF of response latency per scenario, with its "
        "DKW band and the median and p95 with bootstrap intervals.",
    )
    p.add_argument(
        "rollout_dir",
        metavar="ROLLOUT_DIR|RUN_DIR",
        help="one rollout (RUN_DIR/rollouts/ID): its timeline; a run: its latency CDF",
    )
    p.add_argument(
        "-o",
        "--out",
        metavar="PNG",
        help="output (default ROLLOUT_DIR/timeline.png, RUN_DIR/latency_cdf.png)",
    )
    p.add_argument(
        "--labels", metavar="FILE", help="also write an Audacity label track of the same events"
    )


def run(args: argparse.Namespace) -> int:
    from rig.extras import require

    require("plot", "rig plot")
    if os.path.isdir(os.path.join(args.rollout_dir, "rollouts")):
        return _run_cdf(args)
    from rig.analysis.rollout import load_rollout
    from rig.reporting.labels import rollout_labels, write_labels
    from rig.reporting.plot import activity_of, render_png

    _check_audio_recorded(args.rollout_dir)
    view = load_rollout(args.rollout_dir)
    user_speech, system_speech = activity_of(view)
    out = render_png(
        view,
        args.out if args.out else view.path / "timeline.png",
        user_speech=user_speech,
        system_speech=system_speech,
    )
    print(out)
    if args.labels:
        labels = rollout_labels(view, user_speech=user_speech, system_speech=system_speech)
        print(write_labels(labels, args.labels))
    return 0


def _run_cdf(args: argparse.Namespace) -> int:
    from rig.analysis.aggregate import aggregate, load_run
    from rig.errors import ConfigError
    from rig.reporting.cdf import latencies_by_scenario, render_cdf

    if args.labels:
        raise ConfigError("--labels is for one rollout, not a run directory")
    data = load_run(args.rollout_dir)
    groups = latencies_by_scenario(data)
    if not groups:
        raise ConfigError(f"{args.rollout_dir}: no response latencies in ok rollouts")
    out = args.out or os.path.join(args.rollout_dir, "latency_cdf.png")
    print(render_cdf(groups, out, report=aggregate(data), title=str(data.run_dir.name)))
    return 0


def _check_audio_recorded(rollout_dir: str) -> None:
    """A `rig proxy` run records timing only unless --record-audio: its WAVs are empty
    headers, and there is nothing to draw. Say that, and what to do instead."""
    from rig.analysis.rollout import read_json
    from rig.errors import ConfigError

    run_dir = os.path.dirname(os.path.dirname(os.path.abspath(rollout_dir)))
    manifest = read_json(Path(run_dir) / "manifest.json") or {}
    config = manifest.get("config") if isinstance(manifest, dict) else None
    if isinstance(config, dict) and config.get("record_audio") is False:
        raise ConfigError(
            f"{rollout_dir}: recorded by rig proxy without --record-audio (timing only, for "
            "privacy): no audio to draw. rig report "
            f"{run_dir} shows its latencies; run rig proxy --record-audio to plot connections"
        )
