"""`rig run ... --engine ray`: the run's shards on a Ray cluster, merged on return.

Each shard runs `python -m rig.runs.worker --shard K/N` on its node with the run's config
as JSON (`shard_config`: what the driver owns taken out), never the driver's command line.
Ray is imported inside `run_engine` (the `ray` extra). docs/scale-out.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from rig.errors import ConfigError
from rig.ids import check_id
from rig.recordings.rundir import read_json
from rig.runs.config import RunConfig
from rig.runs.records import Engine
from rig.runs.runner import new_run_id
from rig.scaleout.fleetview import FleetMonitor
from rig.scaleout.merge import merge
from rig.scaleout.shardtask import marker_path
from rig.status import DONE, EXIT_FAILED, exit_verdict
from rig.telemetry.fleetlink import TOKEN_ENV, parse_address


@dataclass(frozen=True)
class EngineRun:
    """How an engine's run ended: the merged directory, the verdict, failed shards."""

    run_id: str
    run_dir: str
    verdict: int | None
    failed_codes: tuple[int, ...] = ()


def shard_config(config: RunConfig, fleet_feed: str) -> RunConfig:
    """What every shard runs: the run minus what the driver owns (the engine, the output
    folder and run id, which each shard's worker gets on its own, the live view)."""
    return config.replace(
        engine=Engine(),
        output__argv=config.output.argv or tuple(sys.argv),
        live__headless=True,
        live__detail=None,
        live__fleet_feed=fleet_feed,
    )


def run_engine(config: RunConfig, rollout_ids: Sequence[str]) -> EngineRun:
    """Plan, run and merge the shards."""
    e = config.engine
    if _loopback(e.ray_address):
        # a laptop's Ray stays on 127.0.0.1 (Ray would otherwise bind the host's address);
        # read by Ray at import: set before importing it
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import rig.scaleout.ray_engine as ray_engine  # the ray extra, imported after the env

    run_id = check_id(config.output.run_id or new_run_id(), "--run-id")
    out = os.path.abspath(config.output.out)  # every node sees the same path (scale-out.md)

    def progress(line: str) -> None:
        print(f"rig run --engine ray: {line}", file=sys.stderr, flush=True)

    engine: dict[str, Any] = {"name": "ray", **ray_engine.connect(e.ray_address)}
    monitor = None
    marker = None
    try:
        # a rerun keeps the split it started with (another N would be another slicing, and
        # nothing would resume), whatever the cluster looks like now
        previous = previous_count(out, run_id)
        count = ray_engine.plan_count(len(rollout_ids), e.ray_cpus_per_shard, e.shards or previous)
        if previous is not None and count != previous:
            raise ConfigError(
                f"{out}/{run_id} was split into {previous} shards: rerun with --shards "
                f"{previous} (or give a new --run-id)"
            )
        engine["nodes"] = ray_engine.nodes()
        monitor = _fleet_monitor(config, run_id, rollout_ids, out, count)
        nonce, marker = _results_marker(e.results, out, run_id)
        say = monitor.line
        say(
            f"rig run --engine ray: {len(rollout_ids)} rollouts in {count} shards on "
            f"{len(engine['nodes'])} nodes"
        )
        outcomes = ray_engine.run_shards(
            ["rig.runs.worker"],
            config_json=shard_config(config, monitor.address or "").to_json(),
            out=out,
            run_id=run_id,
            rollout_ids=rollout_ids,
            count=count,
            cpus_per_shard=e.ray_cpus_per_shard,
            progress=lambda line: monitor.notice(f"rig run --engine ray: {line}"),
            results=e.results,
            nonce=nonce,
            env={TOKEN_ENV: monitor.token},
            echo=False,
        )
    finally:
        if monitor is not None:
            monitor.stop()
        if marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(marker)
        ray_engine.shutdown()
    engine["fleet_view"] = {
        "listen": monitor.address,
        "events": monitor.stats.events,
        "refused": monitor.stats.refused,
        "malformed": monitor.stats.malformed,
        "clocks": monitor.clocks,
    }
    engine.update(cpus_per_shard=e.ray_cpus_per_shard, shards=outcomes)
    dirs = [o["dir"] for o in outcomes if os.path.isfile(os.path.join(o["dir"], "manifest.json"))]
    merged = os.path.join(out, run_id)
    if not dirs:
        progress("no shard left a run directory")
        return EngineRun(run_id, merged, EXIT_FAILED)
    argv = list(config.output.argv or sys.argv[1:])
    result = merge(merged, dirs, argv=argv, extra={"engine": engine})
    failed = tuple(EXIT_FAILED for o in outcomes if o.get("returncode") in (1, 2))
    progress(f"merged into {merged} (rerun the same command to redo what was lost)")
    verdict = exit_verdict(
        result.status_counts, complete=result.complete and not any(o["lost"] for o in outcomes)
    )
    return EngineRun(run_id, merged, verdict, failed[:1])


def _fleet_monitor(
    config: RunConfig,
    run_id: str,
    rollout_ids: Sequence[str],
    out: str,
    count: int,
) -> Any:
    """The driver's view of every shard (rig.scaleout.fleetview), listening before they start."""
    done: dict[str, str] = {}  # what an earlier run finished: counted, not redone
    for k in range(count):
        base = os.path.join(out, f"{run_id}-shard-{k}-of-{count}", "rollouts")
        for rid in rollout_ids:
            try:
                m = read_json(os.path.join(base, rid, "metrics.json"))
            except (OSError, ValueError):
                continue
            if isinstance(m, dict) and m.get("status") in DONE:
                done[rid] = str(m["status"])
    host, port = parse_address(config.engine.fleet_listen, "--fleet-listen")
    advertise = None
    if host in ("0.0.0.0", "::"):  # the nodes need an address they can reach
        import ray

        advertise = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    monitor = FleetMonitor(
        run_id,
        list(rollout_ids),
        done,
        listen=(host, port),
        advertise=advertise,
        headless=bool(config.live.headless) or not Console(stderr=True).is_terminal,
        progress_interval_s=config.live.progress_interval_s,
        emit=lambda line: print(line, file=sys.stderr, flush=True),
        detail=config.live.detail,
    )
    monitor.start()
    return monitor


def _results_marker(results: str, out: str, run_id: str) -> tuple[str, str | None]:
    """For --results auto: a file with a fresh nonce in --out; a node that reads it back
    shares the driver's file system (rig.scaleout.shardtask)."""
    if results != "auto":
        return "", None
    nonce = secrets.token_hex(16)
    os.makedirs(out, exist_ok=True)
    path = marker_path(out, run_id)
    with open(path, "w") as f:
        f.write(nonce)
    return nonce, path


def previous_count(out: str, run_id: str) -> int | None:
    """N of the shard directories `<run-id>-shard-K-of-N` an earlier run left (None: none)."""
    pattern = re.compile(rf"\A{re.escape(run_id)}-shard-[0-9]+-of-([0-9]+)\Z")
    found = {
        int(m.group(1))
        for name in (os.listdir(out) if os.path.isdir(out) else [])
        if (m := pattern.match(name))
    }
    if len(found) > 1:
        raise ConfigError(
            f"{out} holds shards of {run_id} split {sorted(found)} ways: merge by hand"
        )
    return found.pop() if found else None


def _loopback(address: str | None) -> bool:
    if not address:
        return True
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1", "[::1]")
