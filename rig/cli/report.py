"""`rig report RUN_DIR`: summary across rollouts."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rig.errors import ConfigError
from rig.summary import load_rollouts, print_summary


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="summary across the rollouts of a run")
    p.add_argument("run_dir")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.run_dir):
        raise ConfigError(f"{args.run_dir}: not a run directory")
    if args.json:
        print(
            json.dumps({"run_dir": args.run_dir, "rollouts": load_rollouts(args.run_dir)}, indent=2)
        )
        return 0
    print_summary(args.run_dir)
    return 0
