"""A real two-node Ray cluster on this machine, on loopback, for the engine's tests and bench.

Ray's own multi-node test cluster (`ray.cluster_utils.Cluster`): a head and a second node,
each a raylet with its own declared CPUs and a small object store, all on 127.0.0.1 (Ray
reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 at import: set before Ray is imported). Always
shut down in `finally`: Cluster.shutdown stops the processes it started, by handle.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

OBJECT_STORE_BYTES = 100 << 20


@contextlib.contextmanager
def two_node_cluster(
    cpus_per_node: int = 2, env: tuple[dict[str, str], dict[str, str]] | None = None
) -> Iterator[Any]:
    """`env`: environment of the head's and the second node's raylets (and so of their
    workers), e.g. a staging directory of each node's own."""
    from ray.cluster_utils import Cluster

    node = {
        "num_cpus": cpus_per_node,
        "object_store_memory": OBJECT_STORE_BYTES,
        "node_ip_address": "127.0.0.1",
    }
    # the head node installs a SIGTERM handler in this process (kill its raylets, then
    # sys.exit(1)): right while the cluster lives, wrong for every later test: put it back
    sigterm = signal.getsignal(signal.SIGTERM)
    head_env, worker_env = env or ({}, {})
    head = {**node, "include_dashboard": False, **({"env_vars": head_env} if head_env else {})}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(**node, **({"env_vars": worker_env} if worker_env else {}))
        cluster.wait_for_nodes()
        yield cluster
    finally:
        try:
            cluster.shutdown()
        finally:
            signal.signal(signal.SIGTERM, sigterm)
