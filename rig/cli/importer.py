"""`rig import POINTS.jsonl|POINTS.csv -o SUITE.toml`: a scenario suite from corpus points.

The table format and how published protocols map onto it: docs/benchmarks.md. The suite is
checked exactly as `rig run` would check it (one line naming the row and column on a
problem, exit 2) before it is written.
"""

from __future__ import annotations

import argparse
from typing import Any

from rig.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="a scenario suite (TOML) from a table of corpus points (JSONL or CSV)",
        description="Turn a points table (audio path, channel, start/end, marks, tags, "
        "history, reference reply, per-item options) into a scenario file. docs/benchmarks.md",
    )
    p.add_argument("points", help="the points table: .jsonl (one object a line) or .csv")
    p.add_argument("-o", "--output", required=True, help="the scenario file to write (.toml)")
    p.add_argument("--name", help="the suite name (default: the output file's stem)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")


def run(args: argparse.Namespace) -> int:
    import os

    from rig.scenarios.importer import read_points, suite_document, to_toml

    if not args.output.lower().endswith(".toml"):
        raise ConfigError(f"-o {args.output}: the suite is written as TOML (.toml)")
    if os.path.exists(args.output) and not args.force:
        raise ConfigError(f"-o {args.output}: exists (--force overwrites it)")
    rows = read_points(args.points)
    doc = suite_document(rows, args.points, args.output, args.name)
    header = f"made by: rig import {os.path.basename(args.points)} ({len(rows)} points)"
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(to_toml(doc, header))
    except OSError as exc:
        raise ConfigError(f"-o {args.output}: cannot write: {exc.strerror}") from exc
    print(f"wrote {args.output}: {len(rows)} items from {args.points}")
    return 0
