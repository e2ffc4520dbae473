"""`rig report` options of the scorers (standard library only: the parser is built for
`rig --help`, which must not import numpy)."""

from __future__ import annotations

import argparse
from typing import Any


def add_report_options(p: Any) -> None:
    """--score, --score-opt, --compare; --by and --cluster unless already there (the refs
    branch adds the same two for the aggregate tables: both read `args.by`/`args.cluster`)."""
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
    for flags, kw in (
        (("--by",), {"action": "append", "metavar": "TAG", "help": "group by this item tag "
                     "(repeatable: groups nest)"}),
        (("--cluster",), {"metavar": "TAG", "help": "bootstrap over this tag's values "
                          "(e.g. conversation) instead of items"}),
    ):  # fmt: skip
        try:
            g.add_argument(*flags, **kw)
        except argparse.ArgumentError:
            pass  # defined by the aggregate's own grouping (same dest)
