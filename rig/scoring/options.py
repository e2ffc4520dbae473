"""`rig report` options of the scorers (standard library only: the parser is built for
`rig --help`, which must not import numpy)."""

from __future__ import annotations

from typing import Any


def add_report_options(p: Any) -> None:
    """--score, --score-opt, --compare. The scorers group and cluster by the report's own
    --by and --cluster (rig/cli/report.py), like the aggregate tables."""
    g = p.add_argument_group("scorers (docs/benchmarks.md, Scorers)")
    g.add_argument(
        "--score",
        action="append",
        metavar="NAME",
        help="score the run against its reference marks and write RUN/scores.json: "
        "pause_turn, eot_int, interaction, onset_distribution (repeatable)",
    )
    g.add_argument(
        "--score-opt",
        action="append",
        default=[],
        metavar="K=V",
        help="a scorer parameter (NAME.K=V for one scorer), e.g. shift_ms=250 source=server_vad",
    )
    g.add_argument(
        "--compare",
        metavar="RUN_B",
        help="Jensen-Shannon distance between this run's onset distribution and RUN_B's over "
        "the items both ran (onset_distribution parameters)",
    )
