"""The parent of `rig run --workers N` (and `rig.run_async(..., workers=N)`): how many
worker processes a run takes, and the run over them (rig.runs.workers: spawning, the start
barrier, the manifests merged).

Each worker gets the run's config as JSON on its stdin (rig.runs.worker), never a command
line to parse again, so a run built from Python keywords shards exactly as one built from
`rig run`'s options.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from rig.analysis.hostpause import verdict_line
from rig.errors import ConfigError
from rig.recordings.jsonwrite import write_json_atomic
from rig.recordings.rundir import done_status
from rig.runs import workers
from rig.runs.config import RunConfig
from rig.runs.records import Role
from rig.runs.runner import new_run_id
from rig.scaleout.fleetview import FleetMonitor
from rig.telemetry.fleetlink import TOKEN_ENV
from rig.telemetry.mqtt import parse_mqtt_url


def resolve_workers(config: RunConfig, n_specs: int, role: Role | None = None) -> int:
    """How many processes this run takes (1: this one). `auto` is 1 where workers cannot
    help or cannot go (a worker itself, an engine's shard, one sound card, a device clock),
    else rig.runs.workers.auto_workers over the cores the rig may fill (half of them for a
    system under test on this machine); an explicit N is checked against the same limits."""
    if role is not None and role.is_worker:
        return 1  # a worker: its parent did the sharding
    asked = config.scale.workers
    reasons = [
        why
        for why, applies in (
            ("a shard of an engine", bool(config.live.fleet_feed or config.scale.shard)),
            ("--transport device (one sound card)", config.target.transport == "device"),
            ("--device-clock (one probe per run)", bool(config.live.device_clock)),
        )
        if applies
    ]
    if asked == "auto":
        if reasons:
            return 1
        c = config.scale.concurrency
        concurrency = None if c == "auto" else int(c)
        cores = workers.cores_for_rig(workers.usable_cores(), config.target.target)
        return workers.auto_workers(concurrency, n_specs, cores)
    n = min(int(asked), max(1, n_specs))
    if n > 1 and reasons:
        raise ConfigError(f"--workers {asked} needs one process here: {reasons[0]}")
    return n


@dataclass(frozen=True)
class Sharded:
    """How a run over worker processes ended: its directory, each worker's exit status and
    the merged manifest."""

    run_id: str
    run_dir: str
    codes: list[int]
    manifest: dict[str, Any] = field(repr=False)


def worker_config(config: RunConfig, run_id: str, fleet_feed: str) -> RunConfig:
    """What every worker runs: the run, under its id, headless, its telemetry to the parent
    (which prints the progress and publishes MQTT for all: the workers do neither)."""
    return config.replace(
        output__run_id=run_id,
        output__argv=config.output.argv or tuple(sys.argv),
        live__headless=True,
        live__progress_interval_s=0.0,
        live__mqtt=None,
        live__fleet_feed=fleet_feed,
    )


def run_workers(config: RunConfig, rollout_ids: list[str], n: int) -> Sharded:
    """The parent of `--workers N`: one fleet view (rig.scaleout.fleetview) fed by the
    workers' telemetry, the workers' stderr passed through it, their manifests merged."""
    run_id = config.output.run_id or new_run_id()
    run_dir = os.path.join(config.output.out, run_id)
    done = {  # what an earlier attempt finished: counted in the progress, not redone
        rid: status
        for rid in rollout_ids
        if (status := done_status(os.path.join(run_dir, "rollouts", rid)))
    }
    monitor = fleet_monitor(config, run_id, rollout_ids, done)
    address = monitor.start()
    payload = worker_config(config, run_id, address).to_json()
    procs = []
    relays = []
    codes: list[int] = []
    barrier = workers.StartBarrier(n)
    manifest: dict[str, Any] = {}
    try:
        for k in range(n):
            p = workers.spawn_run(
                payload, k, n, pipe_stderr=True, env={TOKEN_ENV: monitor.token}, barrier=barrier
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
        manifest = workers.merge(run_dir, n, config.describe_sharded(), [p.pid for p in procs])
        manifest["workers"]["fleet_view"] = {
            "events": monitor.stats.events,
            "refused": monitor.stats.refused,
            "malformed": monitor.stats.malformed,
        }
        if os.path.isdir(run_dir):
            write_json_atomic(os.path.join(run_dir, "manifest.json"), manifest)
    return Sharded(run_id, run_dir, codes, manifest)


def fleet_monitor(
    config: RunConfig, run_id: str, rollout_ids: list[str], done: dict[str, str]
) -> Any:
    """The parent's view of its workers: live view on a terminal, else progress lines; MQTT."""
    live = config.live
    return FleetMonitor(
        run_id,
        rollout_ids,
        done,
        headless=bool(live.headless) or not Console(stderr=True).is_terminal,
        progress_interval_s=live.progress_interval_s,
        emit=say,
        detail=live.detail,
        rollout_lines=False,  # the workers' own lines pass through (pass_lines)
        mqtt=parse_mqtt_url(live.mqtt) if live.mqtt else None,
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


def timing_invalid_lines(
    rollouts: list[dict[str, Any]], host: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """One line per rollout whose own timing failed (rig.core.selfcheck), with why; with a
    host watch (`host`: rig.runs.hostreport), how much of it the machine's pauses explain."""
    lines: list[str] = []
    bad = [m for m in rollouts if m.get("timing_valid") is False]
    for m in bad[:20]:
        reasons = (m.get("rig_timing") or {}).get("reasons") or ["no reason recorded"]
        lines.append(
            f"rig run: {m.get('rollout_id')}: the rig's own timing failed "
            f"({'; '.join(map(str, reasons))}); its latencies are left out of reports "
            "(docs/pacing.md)"
        )
        report = (host or {}).get(str(m.get("rollout_id")))
        said = verdict_line(str(m.get("rollout_id")), report) if report else None
        if said:
            lines.append(f"rig run: host watch: {said}")
    if len(bad) > 20:
        lines.append(f"rig run: ... and {len(bad) - 20} more rollouts whose timing failed")
    if bad:
        lines.append(
            f"rig run: {len(bad)} of {len(rollouts)} rollouts have timing_valid false: ask for "
            "fewer at once (--concurrency), run them again where the machine itself pauses "
            "(--retry-invalid N), or see docs/pacing.md"
        )
    return lines
