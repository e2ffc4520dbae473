"""What the TCP and the UDP relay processes share: starting the child, its first line, its end.

Parent side: `spawn` starts `python -m rig.relay ...` (dies with us, real-time if permitted,
its log where asked), `first_line` reads the line that says it serves, `reap` ends it and
returns the counts of its `done ...` line. Child side: `arguments` and `serve` (SIGTERM or
SIGINT set the stop event; SCHED_FIFO for the loop: rig.relay.process says why a process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence

from rig import realtime

DEFAULT_RT_PRIORITY = 4


def spawn(
    args: list[str],
    *,
    rt_priority: int,
    log_path: str | None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[str]:
    """Start the relay child with `args` (after `-m rig.relay`). From the main thread: the
    child dies with the thread that started it (prctl)."""
    argv = [sys.executable, "-m", "rig.relay", *args]
    argv += ["--rt-priority", str(rt_priority), "--parent", str(os.getpid())]
    if log_path is not None:
        argv += ["--log", log_path]
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=tuple(pass_fds),
    )


def first_line(proc: subprocess.Popen[str], ok: Callable[[str], bool], what: str) -> str:
    """The child's first stdout line, once it serves; OSError with its stderr if it did not."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not ok(line):
        err = proc.stderr.read() if proc.stderr else ""
        proc.wait(5)
        raise OSError(f"{what} did not start: {err.strip()[-500:] or line.strip()}")
    return line


def reap(
    proc: subprocess.Popen[str], escalate: Sequence[int | None], timeout_s: float
) -> list[int]:
    """End the child: each step sends its signal (None: none, the child was told already)
    and waits up to `timeout_s`; then SIGKILL. The numbers of its `done ...` line ([] if
    none: it was killed before it said)."""
    out: str | None = None
    for sig in escalate:
        if sig is not None and proc.poll() is None:
            proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            break
        except subprocess.TimeoutExpired:
            continue
    if out is None:
        proc.kill()
        out, _ = proc.communicate()
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["done"]:
            return [int(p) for p in parts[1:]]
    return []


def arguments(prog: str) -> argparse.ArgumentParser:
    """The options every relay child takes; the caller adds its own."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--spec", required=True)
    p.add_argument("--log")
    p.add_argument("--rt-priority", type=int, default=DEFAULT_RT_PRIORITY)
    p.add_argument("--parent", type=int)
    return p


def serve(rt_priority: int, body: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `body(stop)` on a fresh loop, real time if permitted, until it returns; SIGTERM
    and SIGINT set `stop`."""

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await body(stop)

    with realtime.scheduling(rt_priority):
        asyncio.run(run())
