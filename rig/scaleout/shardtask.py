"""What one shard does on its node, whatever engine placed it there (Ray calls `run_shard`).

How this works: the shard's rig runs as a child process (rig.scaleout.shardproc: it dies with
this process, and its audio loop never shares a process with the engine's threads); its
output is kept (the last `TAIL_LINES`, returned to the driver) and echoed only when the
driver shows no fleet view of its own. Where the results go is decided here, per shard:

- "shared": the rig writes into the driver's `--out`, which this node mounts at the same path;
- "object-store": into a staging directory on this node (`$RIG_SHARD_STAGING`, else the
  temp dir), seeded with what a resume needs, and every rollout that ends is yielded back in
  pieces as it ends (rig.scaleout.transfer), so a node lost later loses only what had not
  ended; the manifest and the other top files follow; the staging copy is removed after;
- "auto": "shared" if the driver's marker file is here with the driver's nonce (the same
  file system, not merely the same path), else "object-store".

The generator yields `Piece`s, then one dict: node, host, exit status, mode, output tail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rig.scaleout.transfer import Outbox, Piece, plant

TAIL_LINES = 40
POLL_S = 0.5
STAGING_ENV = "RIG_SHARD_STAGING"
MARKER_PREFIX = ".rig-results-check-"


def marker_path(out: str, run_id: str) -> str:
    """The file the driver leaves in `--out` for "auto" to find (removed after the run)."""
    return os.path.join(out, f"{MARKER_PREFIX}{run_id}")


def sees_shared(marker: str, nonce: str) -> bool:
    try:
        with open(marker) as f:
            return f.read().strip() == nonce
    except OSError:
        return False


def staging_root() -> str:
    return os.environ.get(STAGING_ENV) or os.path.join(
        tempfile.gettempdir(), f"rig-shards-{os.getuid()}"
    )


def run_shard(
    rig_args: Sequence[str],
    *,
    node: str,
    out: str,
    shard_name: str,
    results: str = "shared",
    nonce: str = "",
    seed: Mapping[str, bytes] | None = None,
    env: Mapping[str, str] | None = None,
    echo: bool = True,
    stdin: str = "",
) -> Iterator[Piece | dict[str, Any]]:
    """Run one shard here (`rig_args`: the module and its arguments, `stdin`: what it reads,
    the run's config); yield its results (object-store) and then its outcome."""
    run_id = shard_name.rsplit("-shard-", 1)[0]
    mode = results
    if mode == "auto":
        mode = "shared" if sees_shared(marker_path(out, run_id), nonce) else "object-store"
    local_out = out
    outbox = None
    if mode == "object-store":
        local_out = os.path.join(staging_root(), f"{shard_name}-{os.getpid()}")
        shutil.rmtree(local_out, ignore_errors=True)
        shard_dir = os.path.join(local_out, shard_name)
        os.makedirs(shard_dir)
        outbox = Outbox(shard_dir, seeded=plant(shard_dir, dict(seed or {})))
    cmd = [sys.executable, "-m", "rig.scaleout.shardproc", str(os.getpid()), *rig_args]
    cmd += ["--out", local_out, "--node-id", node]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it died at once: its exit status says so
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    reader = threading.Thread(target=_read, args=(proc, tail, echo), daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            time.sleep(POLL_S)
            if outbox is not None:
                yield from outbox.poll()
        reader.join(10)
        if outbox is not None:
            yield from outbox.poll(final=True)
        yield {
            "node": node,
            "host": socket.gethostname(),
            "returncode": proc.wait(),
            "results": mode,
            "staging": local_out if outbox is not None else None,
            "tail": list(tail),
        }
    finally:
        if proc.poll() is None:  # the driver cancelled us: the shard stops with its task
            proc.kill()
            proc.wait()
        if outbox is not None:
            shutil.rmtree(local_out, ignore_errors=True)


def _read(proc: subprocess.Popen[str], tail: deque[str], echo: bool) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        tail.append(line.rstrip("\n"))
        if echo:  # forwarded to the driver by the engine's log forwarding, line by line
            print(line, end="", flush=True)
