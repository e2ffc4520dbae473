"""What `rig run` and `rig demo` share about capacity: the verdict on the rig's own timing
(`--timing-tolerance-ms`, `--loop-lag-max-ms`: rig.core.selfcheck) and worker processes
(`--workers N`: rig.workers), with the parent side of a sharded run."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from rig.cli import EXIT_OK, EXIT_ROLLOUTS_FAILED
from rig.errors import ConfigError


def int_or_auto(value: str) -> int | str:
    """`--concurrency` and `--workers`: N or `auto` (N is range-checked with the other
    options, check_run_options)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an integer or auto, not {value!r}") from None


#: `--concurrency N|auto` (auto: the runner's AIMD gate, rig.core.admission)
concurrency_arg = int_or_auto


def resolve_workers(args: argparse.Namespace, n_specs: int) -> int:
    """How many processes this run takes (1: this one). `auto` is 1 where workers cannot
    help or cannot go (a worker itself, an engine's shard, one sound card, a device clock),
    else rig.workers.auto_workers; an explicit N is checked against the same limits."""
    from rig.workers import auto_workers, usable_cores

    if getattr(args, "worker_index", None) is not None:
        return 1  # a worker: its parent did the sharding
    asked = getattr(args, "workers", 1)
    reasons = [
        why
        for why, applies in (
            ("a shard of an engine", bool(getattr(args, "fleet_feed", None) or args.shard)),
            ("--transport device (one sound card)", args.transport == "device"),
            ("--device-clock (one probe per run)", bool(getattr(args, "device_clock", None))),
        )
        if applies
    ]
    if asked == "auto":
        if reasons:
            return 1
        concurrency = None if args.concurrency == "auto" else int(args.concurrency)
        return auto_workers(concurrency, n_specs, usable_cores())
    n = min(int(asked), max(1, n_specs))
    if n > 1 and reasons:
        raise ConfigError(f"--workers {asked} needs one process here: {reasons[0]}")
    return n


def runner_concurrency(args: argparse.Namespace) -> int:
    """What the Runner takes: N, or 0 for auto."""
    return 0 if args.concurrency == "auto" else int(args.concurrency)


def add_capacity_options(p: argparse.ArgumentParser) -> None:
    from rig.workers import PER_LOOP_ROLLOUTS, usable_cores

    p.add_argument(
        "--workers",
        type=int_or_auto,
        default="auto",
        help="worker processes the rollouts are sharded over, each with its own event loop "
        f"and writer; auto (the default): 1 up to {PER_LOOP_ROLLOUTS} rollouts at once, "
        f"then one per {PER_LOOP_ROLLOUTS}, at most the {usable_cores()} usable cores of "
        "this machine (docs/pacing.md)",
    )
    p.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--start-fd", type=int, default=None, help=argparse.SUPPRESS)
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


def run_sharded(args: argparse.Namespace, rollout_ids: list[str], n: int) -> int:
    """The parent of `--workers N`: one fleet view (rig.scaleout.fleetview) fed by the
    workers' telemetry, the workers' stderr passed through it, their manifests merged."""
    import os

    from rig import workers
    from rig.recordings.rundir import done_status
    from rig.recordings.writer import write_json_atomic
    from rig.reporting.summary import print_summary
    from rig.runner import new_run_id
    from rig.telemetry.fleetlink import TOKEN_ENV

    run_id = args.run_id or new_run_id()
    run_dir = os.path.join(args.out, run_id)
    done = {  # what an earlier attempt finished: counted in the progress, not redone
        rid: status
        for rid in rollout_ids
        if (status := done_status(os.path.join(run_dir, "rollouts", rid)))
    }
    monitor = fleet_monitor(args, run_id, rollout_ids, done)
    address = monitor.start()
    # the parent prints progress and publishes MQTT for all: the workers do neither
    argv = workers.without_options(args.argv, {"--mqtt", "--progress-interval-s"})
    extra = ["--run-id", run_id, "--workers", str(n), "--headless"]
    extra += ["--progress-interval-s", "0", "--fleet-feed", address]
    procs = []
    relays = []
    codes = []
    barrier = workers.StartBarrier(n)
    try:
        for k in range(n):
            p = workers.spawn(
                argv, k, extra, pipe_stderr=True, env={TOKEN_ENV: monitor.token}, barrier=barrier
            )
            procs.append(p)
            relays.append(pass_lines(p, monitor, set(rollout_ids)))
        barrier.spawned()
        barrier.release()  # every worker set up before any streams
        codes = [p.wait() for p in procs]
    finally:
        barrier.close()
        workers.stop_all(procs)  # a Ctrl-C here: the workers stop their rollouts too
        for t in relays:
            t.join(10)
        monitor.stop()
        manifest = workers.merge(
            run_dir,
            n,
            {
                "concurrency": args.concurrency,
                "connect_concurrency": args.connect_concurrency,
                "workers": args.workers,
                "mqtt": bool(getattr(args, "mqtt", None)),
            },
            [p.pid for p in procs],
        )
        manifest["workers"]["fleet_view"] = {
            "events": monitor.stats.events,
            "refused": monitor.stats.refused,
            "malformed": monitor.stats.malformed,
        }
        if os.path.isdir(run_dir):
            write_json_atomic(os.path.join(run_dir, "manifest.json"), manifest)
    rollouts = print_summary(run_dir)
    if any(c not in (EXIT_OK, EXIT_ROLLOUTS_FAILED) for c in codes):
        print(f"rig run: a worker failed (exit {codes}); see above", file=sys.stderr)
        return max(codes)
    if manifest.get("stop_reason"):
        print(f"rig run: stopped early: {manifest['stop_reason']}", file=sys.stderr)
        return EXIT_ROLLOUTS_FAILED
    ok = all(m.get("status") == "ok" for m in rollouts) and len(rollouts) >= len(rollout_ids)
    invalid = timing_invalid_lines(rollouts)
    for line in invalid:
        print(line, file=sys.stderr)
    return EXIT_OK if ok and not invalid else EXIT_ROLLOUTS_FAILED


def fleet_monitor(
    args: argparse.Namespace, run_id: str, rollout_ids: list[str], done: dict[str, str]
) -> Any:
    """The parent's view of its workers: live view on a terminal, else progress lines; MQTT."""
    from rich.console import Console

    from rig.scaleout.fleetview import FleetMonitor

    mqtt = None
    if getattr(args, "mqtt", None):
        from rig.telemetry.mqtt import parse_mqtt_url

        mqtt = parse_mqtt_url(args.mqtt)
    return FleetMonitor(
        run_id,
        rollout_ids,
        done,
        headless=bool(args.headless) or not Console(stderr=True).is_terminal,
        progress_interval_s=getattr(args, "progress_interval_s", 10.0),
        emit=say,
        detail=getattr(args, "detail", None),
        rollout_lines=False,  # the workers' own lines pass through (pass_lines)
        mqtt=mqtt,
    )


_SAY = threading.Lock()


def say(line: str) -> None:
    """One whole line on stderr, whichever thread (a worker's relay, the fleet view) says it."""
    with _SAY:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def pass_lines(proc: Any, monitor: Any, rollout_ids: set[str]) -> Any:
    """A thread that passes a worker's stderr on: a rollout's line (`ID: ...`) as a progress
    line (hidden while the live view draws, as in one process), anything else as a notice
    (held until the view closes, never lost)."""

    def main() -> None:
        for raw in proc.stderr:
            line = raw.rstrip("\n")
            if line.split(": ", 1)[0] in rollout_ids:
                monitor.line(line)
            else:
                monitor.notice(line)

    t = threading.Thread(target=main, name=f"worker-{proc.pid}-stderr", daemon=True)
    t.start()
    return t


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
