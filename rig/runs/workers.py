"""One command sharded over worker processes on one machine (`rig run --workers N`,
`rig sim --workers N`).

Why: one Python event loop holds one core; past it, more rollouts do not degrade, they
collapse. Each worker runs in its own process (its own event loop, writer thread,
SCHED_FIFO loop thread, loop watch): a run's worker is `python -m rig.runs.worker
--worker-index K --parent-pid PID` with the run's config as JSON on its stdin (`spawn_run`),
a sim's is `python -m rig sim ARGV --worker-index K` (`spawn`); it dies with the parent
(rig.childproc: PR_SET_PDEATHSIG and a watch thread). `rig run` workers take every N-th
rollout (`shard`) into one run directory and each writes `manifest.worker-K.json`; the
parent merges them into `manifest.json` (`merge`).
Resume works across workers because whether a rollout is done lives in its own directory.
The parent is the run's one voice: the workers' telemetry comes to it over the fleet link
(rig.telemetry.fleetlink, as a Ray engine's shards) and feeds one live view, one set of
progress lines and one MQTT stream (rig.scaleout.fleetview); their stderr lines pass through
it. `rig sim` workers listen on one port with SO_REUSEPORT; the kernel spreads connections.

`--workers auto` (the default): one process unless more rollouts run at once than one loop
paces (`PER_LOOP_ROLLOUTS`, measured with bench/capacity.py: docs/pacing.md), then as many as
that needs, at most one per usable core, and at most half of them when the system under test
runs on this machine (a loopback target: its own loops need the other half; on two cores with
`rig sim --workers 2`, four real-time loops on two cores collapsed where one each held).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import select
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

from rig.clock.base import NS_PER_S, MonotonicClock
from rig.errors import ConfigError

T = TypeVar("T")

#: rollouts at once past which `--workers auto` adds a process. Measured on the 2-core
#: reference machine, the reference system beside the rig (bench/capacity.py --workers 1 2,
#: docs/pacing.md): at 10 one process was as good as two (median p99 5.5 vs 4.7 ms) for less
#: CPU; at 25 two were clearly better (6.2 vs 19.0 ms)
PER_LOOP_ROLLOUTS = 20


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def is_local_target(url: str | None) -> bool:
    """The system under test runs on this machine: its URL's host is a loopback name or
    address (127.0.0.0/8, ::1, localhost)."""
    if not url:
        return False
    host = urllib.parse.urlsplit(url).hostname
    if host is None:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cores_for_rig(cores: int, target_url: str | None) -> int:
    """The cores `--workers auto` may fill: all of them, or half (at least one) when the
    system under test shares them (it needs about as much CPU per stream as the rig:
    docs/pacing.md)."""
    return max(1, cores // 2) if is_local_target(target_url) else cores


def auto_workers(
    concurrency: int | None, rollouts: int, cores: int, per_loop: int = PER_LOOP_ROLLOUTS
) -> int:
    """`--workers auto`: 1 unless more rollouts run at once than one loop holds, then
    ceil(at once / per_loop), at most `cores`. `concurrency` None is `--concurrency auto`,
    whose ceiling is the number of rollouts (each worker then runs its own AIMD gate)."""
    at_once = rollouts if concurrency is None else min(concurrency, rollouts)
    if at_once <= per_loop:
        return 1
    return max(1, min(cores, -(-at_once // per_loop)))


def check_workers(n: int) -> int:
    if not 1 <= n <= 256:
        raise ConfigError(f"--workers must be an integer in [1, 256], got {n}")
    return n


def shard(items: Sequence[T], index: int, workers: int) -> list[T]:
    """Worker `index` of `workers` takes items index, index + workers, ... (stable order, so
    a resume with the same number of workers gives each the same rollouts)."""
    return list(items[index::workers])


def share(total: int, index: int, workers: int) -> int:
    """Worker `index`'s part of a total (concurrency): the parts add up to the total."""
    return max(1, total // workers + (1 if index < total % workers else 0))


def spawn(
    argv: Sequence[str],
    index: int,
    extra: Sequence[str] = (),
    *,
    pipe_stdout: bool = False,
    pipe_stderr: bool = False,
    env: Mapping[str, str] | None = None,
    barrier: StartBarrier | None = None,
) -> subprocess.Popen[str]:
    """Start worker `index`: this command again, told who it is and whose child it is
    (`env`: added to this process's environment, e.g. the fleet link's token; `barrier`:
    it waits there before it streams)."""
    cmd = [sys.executable, "-m", "rig", *argv, *extra]
    cmd += ["--worker-index", str(index), "--parent-pid", str(os.getpid())]
    fds: tuple[int, ...] = ()
    if barrier is not None:
        fds = (barrier.child_fd(index),)
        cmd += ["--start-fd", str(fds[0])]
    out = subprocess.PIPE if pipe_stdout else subprocess.DEVNULL
    err = subprocess.PIPE if pipe_stderr else None
    full_env = {**os.environ, **env} if env else None
    return subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=full_env, pass_fds=fds)


def spawn_run(
    config_json: str,
    index: int,
    workers: int,
    *,
    pipe_stderr: bool = False,
    env: Mapping[str, str] | None = None,
    barrier: StartBarrier | None = None,
) -> subprocess.Popen[str]:
    """Start worker `index` of a run (rig.runs.worker): the run's config goes as JSON on its
    stdin (secrets included: a pipe, never argv, which `ps` shows), who it is on argv."""
    cmd = [sys.executable, "-m", "rig.runs.worker", "--worker-index", str(index)]
    cmd += ["--workers", str(workers), "--parent-pid", str(os.getpid())]
    fds: tuple[int, ...] = ()
    if barrier is not None:
        fds = (barrier.child_fd(index),)
        cmd += ["--start-fd", str(fds[0])]
    err = subprocess.PIPE if pipe_stderr else None
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=err,
        text=True,
        env=full_env,
        pass_fds=fds,
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(config_json)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it died at once: its exit status says so
    return proc


class StartBarrier:
    """No worker streams before every worker is ready to (its imports done, its analysis
    worker up): a worker still starting takes a core from the streams of one that is
    already pacing (measured: bench/capacity.py, docs/pacing.md). One socket pair a worker;
    the worker sends a byte when ready and waits for one back (EOF counts: a worker that
    ended, or with nothing to do, or a parent that is gone, never holds anyone up)."""

    def __init__(self, workers: int) -> None:
        self._pairs = [socket.socketpair() for _ in range(workers)]
        for ours, _theirs in self._pairs:
            ours.setblocking(False)

    def child_fd(self, index: int) -> int:
        return self._pairs[index][1].fileno()

    def spawned(self) -> None:
        """The workers hold their ends now: the parent closes its copies."""
        for _ours, theirs in self._pairs:
            theirs.close()

    def release(self, timeout_s: float = 120.0) -> int:
        """Wait (blocking) until every worker is ready or gone, at most `timeout_s`; then
        let them all go. How many said ready."""
        waiting = {ours.fileno(): ours for ours, _ in self._pairs}
        ready = 0
        clock = MonotonicClock()
        deadline_ns = clock.now_ns() + round(timeout_s * NS_PER_S)
        while waiting and (left := (deadline_ns - clock.now_ns()) / NS_PER_S) > 0:
            readable, _, _ = select.select(list(waiting), [], [], left)
            for fd in readable:
                try:
                    got = waiting[fd].recv(1)
                except BlockingIOError:
                    continue
                except OSError:
                    got = b""
                ready += bool(got)
                del waiting[fd]
        for ours, _ in self._pairs:
            try:
                ours.send(b"g")
            except OSError:
                pass  # that worker is gone
        return ready

    def close(self) -> None:
        for ours, theirs in self._pairs:
            ours.close()
            theirs.close()


async def wait_for_start(fd: int) -> None:
    """A worker's side of the StartBarrier: ready; wait for the go (off the loop)."""

    def exchange() -> None:
        with socket.socket(fileno=fd) as sock:
            try:
                sock.sendall(b"r")
                sock.recv(1)
            except OSError:
                pass  # the parent is gone: nothing to wait for (the worker dies with it)

    await asyncio.to_thread(exchange)


def without_options(
    argv: Sequence[str], valued: Collection[str], flags: Collection[str] = ()
) -> list[str]:
    """`argv` minus the options `valued` (`--opt V` and `--opt=V`) and `flags`: what a
    parent owns and a worker or shard must not repeat."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in valued:
            skip = "=" not in a
            continue
        if a in flags:
            continue
        out.append(a)
    return out


def stop_all(procs: Sequence[subprocess.Popen[str]], timeout_s: float = 10.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def worker_manifest_name(index: int) -> str:
    return f"manifest.worker-{index}.json"


def merge(
    run_dir: str, workers: int, config: dict[str, Any], pids: Sequence[int] = ()
) -> dict[str, Any]:
    """manifest.json of a sharded run from the workers' manifests (`config` overrides the
    workers' own: the totals the user asked for). Missing workers are named."""
    parts: list[dict[str, Any]] = []
    missing = []
    for k in range(workers):
        try:
            with open(os.path.join(run_dir, worker_manifest_name(k)), "rb") as f:
                m = json.loads(f.read())
            parts.append(m if isinstance(m, dict) else {})
        except (OSError, ValueError):
            missing.append(k)
            parts.append({})
    base = next((p for p in parts if p), {})
    merged: dict[str, Any] = dict(base)
    merged["config"] = {**(base.get("config") or {}), **config}
    merged["rollouts"] = {}
    counts: Counter[str] = Counter()
    invalid: list[str] = []
    retried: dict[str, int] = {}
    targets: list[Any] = []
    for p in parts:
        retried.update(p.get("retried_invalid") or {})
        merged["rollouts"].update(p.get("rollouts") or {})
        counts.update(p.get("status_counts") or {})
        invalid += p.get("timing_invalid") or []
        for t in p.get("targets") or []:
            if t not in targets:
                targets.append(t)
    statuses = {p.get("status") for p in parts}
    if missing or statuses - {"done"}:
        merged["status"] = next(
            (s for s in ("interrupted", "stopped", "running") if s in statuses), "interrupted"
        )
    else:
        merged["status"] = "done"
    merged["targets"] = targets
    merged["status_counts"] = dict(counts)
    merged["timing_invalid"] = sorted(invalid)
    merged["retried_invalid"] = dict(sorted(retried.items()))
    merged["stop_reason"] = next((p["stop_reason"] for p in parts if p.get("stop_reason")), None)
    merged["workers"] = {
        "n": workers,
        "pids": list(pids),
        "missing": missing,
        "scheduling": [p.get("scheduling") for p in parts],
        "writer": [p.get("writer") for p in parts],
        "ended_utc": [p.get("ended_utc") for p in parts],
        # --concurrency auto: each worker's own AIMD gate on its own loop
        "concurrency_auto": [p.get("concurrency_auto") for p in parts],
    }
    return merged
