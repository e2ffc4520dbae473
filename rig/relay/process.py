"""The relay as a child process, and the handle the rig holds (`TcpRelay`).

Why a process: the relay must keep time (its log is the ground truth and a late release is
a delay nobody asked for) while the rig's audio loop keeps its own; in one process they share
the GIL and the relay thread waited up to ~180 ms behind the rig's threads on a loaded 2-core
box (measured). A child has its own interpreter, asks for SCHED_FIFO where permitted (as the
rig's loop does: rig.realtime) and dies with its parent (rig.childproc).

Protocol: the child prints `listening HOST PORT` once it accepts connections and, on SIGTERM,
flushes impair.jsonl and prints `done CONNECTIONS CHUNKS ERRORS`.
"""

from __future__ import annotations

import signal
import subprocess
from typing import IO, Any

from rig.childproc import die_with_parent
from rig.clock.base import MonotonicClock
from rig.net.impair import Impairment, parse_impair
from rig.relay import child
from rig.relay.child import DEFAULT_RT_PRIORITY
from rig.relay.engine import RelayEngine


class TcpRelay:
    """Handle of one relay process: `start(log_path)` -> (host, port); `stop()`."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        impairment: Impairment,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        rt_priority: int = DEFAULT_RT_PRIORITY,
    ) -> None:
        self.target = (target_host, target_port)
        self.impairment = impairment
        self.listen = (listen_host, listen_port)
        self.rt_priority = rt_priority
        self.address: tuple[str, int] | None = None
        self.connections = 0
        self.chunks = 0
        self.errors = 0
        self._proc: subprocess.Popen[str] | None = None

    def start(self, log_path: str | None = None) -> tuple[str, int]:
        """Start the relay process (blocking until it listens); returns its address. Call it
        from the main thread: the child dies with the thread that started it (prctl)."""
        if self._proc is not None:
            raise RuntimeError("relay already started")
        target, listen = f"{self.target[0]}:{self.target[1]}", f"{self.listen[0]}:{self.listen[1]}"
        args = ["--target", target, "--listen", listen, "--spec", self.impairment.spec]
        self._proc = child.spawn(args, rt_priority=self.rt_priority, log_path=log_path)
        line = child.first_line(self._proc, _listening, "impair relay").split()
        self.address = (line[1], int(line[2]))
        return self.address

    def stop(self) -> None:
        """Stop the process (its log flushed); safe twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        counts = child.reap(proc, [signal.SIGTERM], 10)
        if len(counts) == 3:
            self.connections, self.chunks, self.errors = counts

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, Any]:
        return {"kind": "tcp", **self.impairment.as_dict()}


def _listening(line: str) -> bool:
    parts = line.split()
    return len(parts) == 3 and parts[0] == "listening"


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    p = child.arguments("python -m rig.relay")
    p.add_argument("--target", required=True)
    p.add_argument("--listen", default="127.0.0.1:0")
    args = p.parse_args(argv)
    if args.parent:
        die_with_parent(args.parent)
    log: IO[str] | None = open(args.log, "a", buffering=1, encoding="utf-8") if args.log else None  # noqa: SIM115
    engine = RelayEngine(_addr(args.target), parse_impair(args.spec), MonotonicClock(), log)

    def ready(addr: tuple[str, int]) -> None:
        print(f"listening {addr[0]} {addr[1]}", flush=True)

    try:
        child.serve(args.rt_priority, lambda stop: engine.serve(_addr(args.listen), ready, stop))
    finally:
        if log is not None:
            log.close()
    print(f"done {engine.connections} {engine.chunks} {len(engine.errors)}", flush=True)
    return 0
