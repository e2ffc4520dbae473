"""What `rig run` and `rig demo` share about capacity: the verdict on the rig's own timing
(`--timing-tolerance-ms`, `--loop-lag-max-ms`: rig.core.selfcheck) and worker processes
(`--workers N`: rig.workers), with the parent side of a sharded run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rig.cli import EXIT_OK, EXIT_ROLLOUTS_FAILED


def concurrency_arg(value: str) -> int | str:
    """`--concurrency N` or `auto` (the runner's AIMD gate, rig.core.admission); N is
    range-checked with the other options (check_run_options)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an integer or auto, not {value!r}") from None


def runner_concurrency(args: argparse.Namespace) -> int:
    """What the Runner takes: N, or 0 for auto."""
    return 0 if args.concurrency == "auto" else int(args.concurrency)


def add_capacity_options(p: argparse.ArgumentParser) -> None:
    from rig.workers import usable_cores

    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes the rollouts are sharded over, each with its own event loop "
        f"and writer (default 1; this machine has {usable_cores()} usable cores; "
        "docs/pacing.md)",
    )
    p.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--timing-tolerance-ms",
        type=float,
        default=5.0,
        help="a rollout's own timing is valid while its uplink lateness p99 and the event "
        "loop's lag p99 stay within this (default 5; recorded in the manifest)",
    )
    p.add_argument(
        "--loop-lag-max-ms",
        type=float,
        default=20.0,
        help="any single event-loop lag above this makes a rollout's timing not valid "
        "(default 20: one frame)",
    )


def be_worker(args: argparse.Namespace) -> None:
    """In a worker: die with the parent that started it (rig.childproc)."""
    if getattr(args, "parent_pid", None):
        from rig.childproc import die_with_parent

        die_with_parent(args.parent_pid)


def tolerance_of(args: argparse.Namespace) -> Any:
    """The TimingTolerance the options ask for (defaults where a command has none)."""
    import dataclasses

    from rig.core.selfcheck import TimingTolerance

    out = TimingTolerance()
    tol = getattr(args, "timing_tolerance_ms", None)
    if tol is not None:
        out = dataclasses.replace(out, lateness_p99_ms=tol, loop_lag_p99_ms=tol)
    lag_max = getattr(args, "loop_lag_max_ms", None)
    if lag_max is not None:
        out = dataclasses.replace(out, loop_lag_max_ms=lag_max)
    return out


def run_sharded(args: argparse.Namespace, n_specs: int) -> int:
    """The parent of `--workers N`: start the workers, wait, merge their manifests, report."""
    import os

    from rig import workers
    from rig.recordings.writer import write_json_atomic
    from rig.reporting.summary import print_summary
    from rig.runner import new_run_id

    n = min(args.workers, max(1, n_specs))
    run_id = args.run_id or new_run_id()
    extra = ["--run-id", run_id, "--workers", str(n), "--headless"]
    procs = [workers.spawn(args.argv, k, extra) for k in range(n)]
    codes = []
    try:
        codes = [p.wait() for p in procs]
    finally:
        workers.stop_all(procs)  # a Ctrl-C here: the workers stop their rollouts too
        run_dir = os.path.join(args.out, run_id)
        manifest = workers.merge(
            run_dir,
            n,
            {
                "concurrency": args.concurrency,
                "connect_concurrency": args.connect_concurrency,
            },
            [p.pid for p in procs],
        )
        if os.path.isdir(run_dir):
            write_json_atomic(os.path.join(run_dir, "manifest.json"), manifest)
    rollouts = print_summary(run_dir)
    if any(c not in (EXIT_OK, EXIT_ROLLOUTS_FAILED) for c in codes):
        print(f"rig run: a worker failed (exit {codes}); see above", file=sys.stderr)
        return max(codes)
    if manifest.get("stop_reason"):
        print(f"rig run: stopped early: {manifest['stop_reason']}", file=sys.stderr)
        return EXIT_ROLLOUTS_FAILED
    ok = all(m.get("status") == "ok" for m in rollouts) and len(rollouts) >= n_specs
    invalid = timing_invalid_lines(rollouts)
    for line in invalid:
        print(line, file=sys.stderr)
    return EXIT_OK if ok and not invalid else EXIT_ROLLOUTS_FAILED


def timing_invalid_lines(rollouts: list[dict[str, Any]]) -> list[str]:
    """One line per rollout whose own timing failed (rig.core.selfcheck), with why."""
    lines: list[str] = []
    bad = [m for m in rollouts if m.get("timing_valid") is False]
    for m in bad[:20]:
        reasons = (m.get("rig_timing") or {}).get("reasons") or ["no reason recorded"]
        lines.append(
            f"rig run: {m.get('rollout_id')}: the rig's own timing failed "
            f"({'; '.join(map(str, reasons))}); its latencies are left out of reports "
            "(docs/pacing.md)"
        )
    if len(bad) > 20:
        lines.append(f"rig run: ... and {len(bad) - 20} more rollouts whose timing failed")
    if bad:
        lines.append(
            f"rig run: {len(bad)} of {len(rollouts)} rollouts have timing_valid false: ask for "
            "fewer at once (--concurrency), or see docs/pacing.md"
        )
    return lines
