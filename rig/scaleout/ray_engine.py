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
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import ray

from rig.errors import RigError
from rig.scaleout.lost import NODE_LOST, mark_lost
from rig.scaleout.shards import read_json
from rig.scaleout.shardtask import run_shard
from rig.scaleout.transfer import Inbox, Piece, seed
from rig.shard import split

#: pieces a shard may have in flight before it waits for the driver to take them (8 MiB each)
BACKPRESSURE = 4


@ray.remote(max_retries=0)
def shard_task(rig_args: list[str], options: dict[str, Any]) -> Iterator[Any]:
    """One shard in its own process on whichever node Ray chose (rig.scaleout.shardtask):
    its results in pieces through the object store (or none: a shared --out), then its
    outcome."""
    node = ray.get_runtime_context().get_node_id()
    yield from run_shard(rig_args, node=node, **options)


def connect(address: str | None, *, object_store_mb: int = 100) -> dict[str, Any]:
    """Join the cluster at `address`, or start a small local Ray (a laptop)."""
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(
            object_store_memory=object_store_mb << 20,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,  # a shard's lines come back in its outcome: never over the view
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
    config_json: str = "",
    out: str,
    run_id: str,
    rollout_ids: Sequence[str],
    count: int,
    cpus_per_shard: float,
    progress: Callable[[str], None],
    results: str = "shared",
    nonce: str = "",
    env: Mapping[str, str] | None = None,
    echo: bool = True,
) -> list[dict[str, Any]]:
    """Run every shard as a Ray task, take its results in, mark what dead shards left
    unfinished."""
    slices = split(rollout_ids, count)
    tasks: list[tuple[Any, int]] = []
    for k in range(count):
        name = f"{run_id}-shard-{k}-of-{count}"
        options = {
            "out": out,
            "shard_name": name,
            "results": results,
            "nonce": nonce,
            "seed": seed(os.path.join(out, name)) if results != "shared" else None,
            "env": dict(env or {}),
            "echo": echo,
            "stdin": config_json,
        }
        args = [*rig_args, "--run-id", run_id, "--shard", f"{k}/{count}"]
        task: Any = shard_task
        stream = task.options(
            num_cpus=cpus_per_shard,
            scheduling_strategy="SPREAD",
            _generator_backpressure_num_objects=BACKPRESSURE,
        ).remote(args, options)
        tasks.append((stream, k))
    finals: dict[int, dict[str, Any]] = {}
    inboxes: dict[int, Inbox] = {}
    outcomes: dict[int, dict[str, Any]] = {}
    pending = [g for g, _ in tasks]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        gen: Any = ready[0]  # an ObjectRefGenerator: next() is the shard's next item
        k = next(i for g, i in tasks if g is gen)
        shard_dir = os.path.join(out, f"{run_id}-shard-{k}-of-{count}")
        try:
            item = ray.get(next(gen))
        except StopIteration:
            outcomes[k] = _outcome(k, count, shard_dir, finals.get(k), None, slices, progress)
            _close(inboxes.pop(k, None), outcomes[k])
            continue
        except ray.exceptions.RayError as exc:
            lost = f"{NODE_LOST}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            outcomes[k] = _outcome(k, count, shard_dir, None, lost, slices, progress)
            _close(inboxes.pop(k, None), outcomes[k])
            continue
        pending.append(gen)
        if isinstance(item, Piece):
            inbox = inboxes.get(k) or inboxes.setdefault(k, Inbox(shard_dir))
            try:
                inbox.take(item)
            except RigError as exc:  # that rollout stays unfinished: marked, redone next time
                progress(f"shard {k}/{count}: a transfer failed: {exc}")
        elif isinstance(item, dict):
            finals[k] = item
    return [outcomes[k] for k in range(count)]


def _outcome(
    k: int,
    count: int,
    shard_dir: str,
    final: dict[str, Any] | None,
    lost: str | None,
    slices: list[list[str]],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """What became of shard k: its exit, where it ran, what it lost (marked)."""
    result = dict(final or {"node": None, "host": None, "returncode": None})
    tail = result.pop("tail", None) or []
    if lost is None:
        code = result.get("returncode")
        lost = (
            _lost_reason(code)
            if isinstance(code, int)
            else f"{NODE_LOST}: the shard ended without an outcome"
        )
    outcome = {"shard": f"{k}/{count}", "dir": shard_dir, **result, "lost": lost}
    if lost is not None:
        placement = _placement(shard_dir, k, count, result)
        outcome["node"] = placement["node"]
        outcome["marked"] = mark_lost(shard_dir, slices[k], lost, placement)
        progress(f"shard {k}/{count}: {lost}; {len(outcome['marked'])} rollouts marked")
    else:
        progress(f"shard {k}/{count}: exit {result['returncode']} on node {result['node']}")
    if tail and (lost is not None or result.get("returncode") not in (0, 3)):
        progress(f"shard {k}/{count}: its last lines:\n  " + "\n  ".join(tail[-15:]))
    return outcome


def _close(inbox: Inbox | None, outcome: dict[str, Any]) -> None:
    """The shard's stream ended: what came in through the object store, in its outcome."""
    if inbox is None:
        return
    inbox.close()
    st = inbox.stats
    outcome["transfer"] = {
        "rollouts": st.rollouts,
        "files": st.files,
        "bytes": st.bytes,
        "duplicates": st.duplicates,
        "moved_aside": st.moved_aside,
    }


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
