"""`rig run ... --engine ray`: the run's shards on a Ray cluster, merged on return.

Imported when the parser is built: standard library and rig.errors/rig.extras only at module
level; Ray is imported inside `run_engine` (the `ray` extra). docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from rig.errors import ConfigError
from rig.extras import require

#: options the driver owns: stripped from the argv each shard runs with
_DRIVER_VALUED = frozenset(
    {"--engine", "--ray-address", "--shards", "--ray-cpus-per-shard", "--out", "--run-id"}
    | {"--shard", "--node-id", "--results", "--fleet-listen", "--fleet-feed", "--detail"}
)
_DRIVER_FLAGS = frozenset({"--headless"})


def add_engine_options(g: Any) -> None:
    g.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local (this process) or ray: one shard per Ray task, merged on return",
    )
    g.add_argument("--ray-address", help="Ray cluster to join (default: start a local Ray)")
    g.add_argument("--shards", type=int, help="shards (default: cluster CPUs / cpus per shard)")
    g.add_argument(
        "--ray-cpus-per-shard",
        type=float,
        default=2.0,
        help="CPUs each shard asks Ray for (default 2: a core pair per audio loop)",
    )
    g.add_argument(
        "--results",
        choices=["auto", "shared", "object-store"],
        default="auto",
        help="how shard results reach --out: shared (every node mounts --out at the same "
        "path), object-store (through Ray, rollout by rollout as they end), auto (shared "
        "where a node sees the driver's --out, else object-store; the default)",
    )
    g.add_argument(
        "--fleet-listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where the driver takes the shards' live telemetry (default 127.0.0.1, a free "
        "port; a cluster: an address the nodes reach, e.g. 0.0.0.0:0)",
    )


def shard_argv(argv: Sequence[str]) -> list[str]:
    """The command line minus what the driver sets per shard (`--opt V` and `--opt=V`)."""
    from rig.workers import without_options

    return [*without_options(argv, _DRIVER_VALUED, _DRIVER_FLAGS), "--headless"]


def check_engine_options(args: argparse.Namespace) -> None:
    """Before anything is opened: what an engine cannot do, and ranges."""
    if args.engine == "local":
        if args.shards is not None or args.ray_address is not None:
            raise ConfigError("--shards and --ray-address go with --engine ray")
        if args.results != "auto" or args.fleet_listen != "127.0.0.1:0":
            raise ConfigError("--results and --fleet-listen go with --engine ray")
        return
    if args.shard is not None:
        raise ConfigError("--engine ray plans the shards itself: drop --shard")
    if args.transport == "device":
        raise ConfigError("--engine ray runs rollouts on other nodes: not over this sound card")
    if args.shards is not None and not 1 <= args.shards <= 10_000:
        raise ConfigError(f"--shards must be in [1, 10000], got {args.shards}")
    if not 0.1 <= args.ray_cpus_per_shard <= 1024:
        raise ConfigError(
            f"--ray-cpus-per-shard must be in [0.1, 1024], got {args.ray_cpus_per_shard}"
        )
    from rig.telemetry.fleetlink import parse_address

    parse_address(args.fleet_listen, "--fleet-listen")
    require("ray", "--engine ray")


def run_engine(args: argparse.Namespace, rollout_ids: Sequence[str]) -> int:
    """Plan, run and merge the shards; the exit status of `rig run`."""
    from rig.cli import EXIT_FAILED, EXIT_OK, EXIT_ROLLOUTS_FAILED

    check_engine_options(args)
    if _loopback(args.ray_address):
        # a laptop's Ray stays on 127.0.0.1 (Ray would otherwise bind the host's address);
        # read by Ray at import: set before importing it
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from rig.ids import check_id
    from rig.reporting.summary import print_summary
    from rig.runner import new_run_id
    from rig.scaleout import ray_engine
    from rig.scaleout.merge import merge
    from rig.telemetry.fleetlink import TOKEN_ENV

    run_id = check_id(args.run_id or new_run_id(), "--run-id")
    out = os.path.abspath(args.out)  # every node sees the same path (docs/scale-out.md)

    def progress(line: str) -> None:
        print(f"rig run --engine ray: {line}", file=sys.stderr, flush=True)

    engine: dict[str, Any] = {"name": "ray", **ray_engine.connect(args.ray_address)}
    monitor = None
    marker = None
    try:
        # a rerun keeps the split it started with (another N would be another slicing, and
        # nothing would resume), whatever the cluster looks like now
        previous = previous_count(out, run_id)
        count = ray_engine.plan_count(
            len(rollout_ids), args.ray_cpus_per_shard, args.shards or previous
        )
        if previous is not None and count != previous:
            raise ConfigError(
                f"{out}/{run_id} was split into {previous} shards: rerun with --shards "
                f"{previous} (or give a new --run-id)"
            )
        engine["nodes"] = ray_engine.nodes()
        monitor = _fleet_monitor(args, run_id, rollout_ids, out, count)
        nonce, marker = _results_marker(args.results, out, run_id)
        say = monitor.line
        say(
            f"rig run --engine ray: {len(rollout_ids)} rollouts in {count} shards on "
            f"{len(engine['nodes'])} nodes"
        )
        outcomes = ray_engine.run_shards(
            [*shard_argv(args.argv), "--fleet-feed", monitor.address or ""],
            out=out,
            run_id=run_id,
            rollout_ids=rollout_ids,
            count=count,
            cpus_per_shard=args.ray_cpus_per_shard,
            progress=lambda line: monitor.notice(f"rig run --engine ray: {line}"),
            results=args.results,
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
    engine.update(cpus_per_shard=args.ray_cpus_per_shard, shards=outcomes)
    dirs = [o["dir"] for o in outcomes if os.path.isfile(os.path.join(o["dir"], "manifest.json"))]
    merged = os.path.join(out, run_id)
    if not dirs:
        progress("no shard left a run directory")
        return EXIT_FAILED
    result = merge(merged, dirs, argv=args.argv, extra={"engine": engine})
    print_summary(merged)
    progress(f"merged into {merged} (rerun the same command to redo what was lost)")
    if any(o.get("returncode") in (1, 2) for o in outcomes):
        return EXIT_FAILED
    ok = result.complete and set(result.status_counts) <= {"ok"}
    return EXIT_OK if ok and not any(o["lost"] for o in outcomes) else EXIT_ROLLOUTS_FAILED


def _fleet_monitor(
    args: argparse.Namespace,
    run_id: str,
    rollout_ids: Sequence[str],
    out: str,
    count: int,
) -> Any:
    """The driver's view of every shard (rig.scaleout.fleetview), listening before they start."""
    from rich.console import Console

    from rig.recordings.rundir import read_json
    from rig.scaleout.fleetview import FleetMonitor
    from rig.telemetry.fleetlink import parse_address

    done: dict[str, str] = {}  # what an earlier run finished: counted, not redone
    for k in range(count):
        base = os.path.join(out, f"{run_id}-shard-{k}-of-{count}", "rollouts")
        for rid in rollout_ids:
            try:
                m = read_json(os.path.join(base, rid, "metrics.json"))
            except (OSError, ValueError):
                continue
            if isinstance(m, dict) and m.get("status") in ("ok", "no_audio"):
                done[rid] = str(m["status"])
    host, port = parse_address(args.fleet_listen, "--fleet-listen")
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
        headless=bool(args.headless) or not Console(stderr=True).is_terminal,
        progress_interval_s=getattr(args, "progress_interval_s", 10.0),
        emit=lambda line: print(line, file=sys.stderr, flush=True),
        detail=getattr(args, "detail", None),
    )
    monitor.start()
    return monitor


def _results_marker(results: str, out: str, run_id: str) -> tuple[str, str | None]:
    """For --results auto: a file with a fresh nonce in --out; a node that reads it back
    shares the driver's file system (rig.scaleout.shardtask)."""
    import secrets

    from rig.scaleout.shardtask import marker_path

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
    import re

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
