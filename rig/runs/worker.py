"""One process of a run started by another: `python -m rig.runs.worker [ROLE...]`, the run's
config as JSON on stdin (RunConfig.to_json).

Who starts it: the parent of `--workers N` (rig.runs.sharded: `--worker-index K --workers N
--parent-pid PID --start-fd FD`) and an engine's shard task (rig.scaleout.shardtask:
`--run-id R --shard K/N --out DIR --node-id NODE`). It runs its part of the run exactly as
the parent would in one process and exits 0 when every rollout it ran is ok, 3 when one is
not, 2 on a bad config and 1 when it failed; errors are one line on stderr, as the CLI's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rig.childproc import die_with_parent
from rig.errors import AudioInputError, ConfigError, RigError, ScenarioError
from rig.runs.config import RunConfig
from rig.runs.eventloop import run_on
from rig.runs.launch import resolved, run_here
from rig.runs.records import Role
from rig.runs.specs import prepare
from rig.shard import parse_shard
from rig.status import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, exit_verdict


def role_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rig.runs.worker")
    p.add_argument("--worker-index", type=int)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--parent-pid", type=int)
    p.add_argument("--start-fd", type=int)
    p.add_argument("--node-id")
    p.add_argument("--out")
    p.add_argument("--run-id")
    p.add_argument("--shard")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = role_parser().parse_args(argv)
    if a.parent_pid:
        die_with_parent(a.parent_pid)  # a worker dies with the parent that started it
    role = Role(
        worker_index=a.worker_index,
        workers=a.workers,
        parent_pid=a.parent_pid,
        start_fd=a.start_fd,
        node_id=a.node_id,
    )
    try:
        config = RunConfig.from_json(sys.stdin.read())
        if a.out is not None:
            config = config.replace(output__out=a.out)
        if a.run_id is not None:
            config = config.replace(output__run_id=a.run_id)
        if a.shard is not None:
            config = config.replace(scale__shard=parse_shard(a.shard))
        config = resolved(config)
        prepared = prepare(config)
        outcome = run_on(config.scale.loop, run_here(config, prepared, role))
    except RigError as exc:
        print(f"rig run: error: {exc}", file=sys.stderr)
        usage = isinstance(exc, ConfigError | ScenarioError | AudioInputError)
        return EXIT_USAGE if usage else EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    mine = list(outcome.results.values())
    return exit_verdict(
        (m.get("status") for m in mine),
        timing_valid=(m.get("timing_valid") for m in mine),
        stopped=bool(outcome.stop_reason),
    )


if __name__ == "__main__":
    sys.exit(main())
