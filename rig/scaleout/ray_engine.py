"""`rig run ... --engine ray`: the shards of a run as Ray tasks, merged when they are done.

How this works
--------------
The driver (the `rig run` process) connects to Ray (`--ray-address`, or a local Ray it
starts), plans N shards (`--shards`, default: the cluster's CPUs / `--ray-cpus-per-shard`,
at most one per rollout) and submits one task per shard asking for that many CPUs, spread
over the nodes (`SPREAD`). A task starts the shard as its own process, `rig run ARGS
--shard K/N --node-id NODE` through rig.scaleout.shardproc, so the audio loop never shares a
process with Ray's threads, asks for real-time scheduling itself (granted where the node
allows it: the shard's manifest says) and dies with the task's worker. Its progress lines
come back to the driver through Ray's log forwarding.

Results travel through the shared `--out` path: every shard writes its run directory
`OUT/<run-id>-shard-K-of-N` there (a laptop's disk; on a cluster, a file system every node
mounts at the same path), and the driver merges them into `OUT/<run-id>` (rig.scaleout.merge)
before it returns. A task that fails (node lost, worker crashed) or a shard process killed by
a signal: its unfinished rollouts get status `error`, reason `node lost: ...`
(rig.scaleout.lost); the same command again redoes only those, every shard resuming its own
directory. The merged manifest's `engine` block lists the nodes Ray saw (CPUs, alive), each
shard's node, exit status and what was lost.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import ray

from rig.scaleout.lost import NODE_LOST, mark_lost
from rig.scaleout.shards import read_json
from rig.shard import split


@ray.remote(max_retries=0)
def shard_task(rig_args: list[str]) -> dict[str, Any]:
    """One shard in its own process on whichever node Ray chose; its exit status back."""
    node = ray.get_runtime_context().get_node_id()
    cmd = [
        sys.executable,
        "-m",
        "rig.scaleout.shardproc",
        str(os.getpid()),
        *rig_args,
        "--node-id",
        node,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # forwarded to the driver by Ray, line by line
        print(line, end="", flush=True)
    return {"node": node, "host": socket.gethostname(), "returncode": proc.wait()}


def connect(address: str | None, *, object_store_mb: int = 100) -> dict[str, Any]:
    """Join the cluster at `address`, or start a small local Ray (a laptop)."""
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
    else:
        ray.init(
            object_store_memory=object_store_mb << 20,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    return {"address": address or "local", "ray_version": ray.__version__}


def plan_count(n_rollouts: int, cpus_per_shard: float, requested: int | None) -> int:
    """Shards: as asked, else one per `cpus_per_shard` CPUs of the cluster; never more
    than there are rollouts, never fewer than one."""
    if requested:
        return max(1, requested)
    cpus = float(ray.cluster_resources().get("CPU", 1.0))  # type: ignore[no-untyped-call]
    return max(1, min(n_rollouts, int(cpus // cpus_per_shard) or 1))


def nodes() -> list[dict[str, Any]]:
    """What Ray knows of its nodes: id, address, CPUs, alive."""
    return [
        {
            "node": n.get("NodeID"),
            "address": n.get("NodeManagerAddress"),
            "cpus": (n.get("Resources") or {}).get("CPU"),
            "alive": n.get("Alive"),
        }
        for n in ray.nodes()  # type: ignore[no-untyped-call]
    ]


def run_shards(
    rig_args: Sequence[str],
    *,
    out: str,
    run_id: str,
    rollout_ids: Sequence[str],
    count: int,
    cpus_per_shard: float,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Run every shard as a Ray task; mark what dead shards left unfinished."""
    slices = split(rollout_ids, count)
    refs = {}
    for k in range(count):
        args = [*rig_args, "--out", out, "--run-id", run_id, "--shard", f"{k}/{count}"]
        ref = shard_task.options(num_cpus=cpus_per_shard, scheduling_strategy="SPREAD").remote(args)
        refs[ref] = k
    outcomes: dict[int, dict[str, Any]] = {}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        k = refs[ready[0]]
        try:
            result: dict[str, Any] = ray.get(ready[0])
            lost = _lost_reason(result["returncode"])
        except ray.exceptions.RayError as exc:
            result = {"node": None, "host": None, "returncode": None}
            lost = f"{NODE_LOST}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        shard_dir = os.path.join(out, f"{run_id}-shard-{k}-of-{count}")
        outcome = {"shard": f"{k}/{count}", "dir": shard_dir, **result, "lost": lost}
        if lost is not None:
            placement = _placement(shard_dir, k, count, result)
            outcome["node"] = placement["node"]
            outcome["marked"] = mark_lost(shard_dir, slices[k], lost, placement)
            progress(f"shard {k}/{count}: {lost}; {len(outcome['marked'])} rollouts marked")
        else:
            progress(f"shard {k}/{count}: exit {result['returncode']} on node {result['node']}")
        outcomes[k] = outcome
    return [outcomes[k] for k in range(count)]


def _lost_reason(returncode: int) -> str | None:
    """A shard process killed by a signal is lost with its node; an exit status is not."""
    if returncode >= 0:
        return None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"{NODE_LOST}: the shard process was killed by {name}"


def _placement(shard_dir: str, k: int, count: int, result: dict[str, Any]) -> dict[str, Any]:
    """Where a lost shard ran: the task's answer, else its manifest (written at its start)."""
    try:
        manifest = read_json(os.path.join(shard_dir, "manifest.json"))
    except (OSError, ValueError):
        manifest = {}
    manifest = manifest if isinstance(manifest, dict) else {}
    return {
        "host": result.get("host") or manifest.get("host"),
        "node": result.get("node") or manifest.get("node"),
        "shard": f"{k}/{count}",
    }


def shutdown() -> None:
    ray.shutdown()
