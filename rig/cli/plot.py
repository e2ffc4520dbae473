"""`rig plot ROLLOUT_DIR [-o PNG] [--labels FILE]`: timeline picture of one rollout."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plot",
        help="timeline picture of one rollout",
        description="Draw both tracks, speech activity, turn boundaries, injections and "
        "response latencies of one rollout on one time axis (PNG).",
    )
    p.add_argument("rollout_dir", metavar="ROLLOUT_DIR")
    p.add_argument("-o", "--out", metavar="PNG", help="output (default ROLLOUT_DIR/timeline.png)")
    p.add_argument(
        "--labels", metavar="FILE", help="also write an Audacity label track of the same events"
    )


def run(args: argparse.Namespace) -> int:
    from rig.extras import require

    require("plot", "rig plot")
    from rig.analysis.rollout import load_rollout
    from rig.reporting.labels import rollout_labels, write_labels
    from rig.reporting.plot import activity_of, render_png

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
