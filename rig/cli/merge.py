"""`rig merge OUT SHARD_DIR...`: shard run directories (`rig run --shard K/N`, one per pod
or Ray task) combined into one run directory that `rig report` reads like any other.

Exit status: 0 merged, complete, every rollout ok; 2 refused (the shards differ in code
version, config or seed; see --force) or bad input; 3 merged, but rollouts are missing,
duplicated or not ok (listed); 1 the merge failed while writing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("merge", help="combine shard run directories into one run directory")
    p.add_argument("out", help="the merged run directory (new, or an earlier merge to redo)")
    p.add_argument("shard_dirs", nargs="+", metavar="SHARD_DIR", help="shard run directories")
    p.add_argument(
        "--force",
        action="store_true",
        help="merge shards recorded with another code version, config or seed (the "
        "differences are recorded in the merged manifest)",
    )


def run(args: argparse.Namespace) -> int:
    from rig.scaleout.merge import merge

    result = merge(args.out, args.shard_dirs, force=args.force)
    counts = " ".join(f"{k}={v}" for k, v in sorted(result.status_counts.items()))
    print(
        f"rig merge: {args.out}: {sum(result.status_counts.values())} rollouts from "
        f"{len(args.shard_dirs)} shards ({counts or 'none'}); {result.linked} files linked, "
        f"{result.copied} copied"
    )
    for change in result.changes:
        print(
            f"forced: {change['shard']}: {change['field']}: {change['before']!r} -> "
            f"{change['after']!r}",
            file=sys.stderr,
        )
    for rid, where in sorted(result.duplicates.items()):
        print(f"duplicate: {rid} in {', '.join(where)} (kept one)", file=sys.stderr)
    for rid in result.missing:
        print(f"missing: {rid} (planned by a shard, never recorded)", file=sys.stderr)
    if result.missing_shards:
        shards = ", ".join(str(k) for k in result.missing_shards)
        print(f"missing: shard(s) {shards} of the split were not given", file=sys.stderr)
    from rig.status import exit_verdict

    return exit_verdict(result.status_counts, complete=result.complete)
