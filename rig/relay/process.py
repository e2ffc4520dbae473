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

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from typing import IO, Any

from rig import realtime
from rig.childproc import die_with_parent
from rig.clock.base import MonotonicClock
from rig.net.impair import Impairment, parse_impair
from rig.relay.engine import RelayEngine

DEFAULT_RT_PRIORITY = 4


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
        argv = [
            sys.executable,
            "-m",
            "rig.relay",
            "--target",
            f"{self.target[0]}:{self.target[1]}",
            "--listen",
            f"{self.listen[0]}:{self.listen[1]}",
            "--spec",
            self.impairment.spec,
            "--rt-priority",
            str(self.rt_priority),
            "--parent",
            str(os.getpid()),
        ]
        if log_path is not None:
            argv += ["--log", log_path]
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 3 or line[0] != "listening":
            err = self._proc.stderr.read() if self._proc.stderr else ""
            self._proc.wait(5)
            raise OSError(f"impair relay did not start: {err.strip()[-500:] or line}")
        self.address = (line[1], int(line[2]))
        return self.address

    def stop(self) -> None:
        """Stop the process (its log flushed); safe twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "done":
                self.connections, self.chunks, self.errors = map(int, parts[1:])

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, Any]:
        return {"kind": "tcp", **self.impairment.as_dict()}


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m rig.relay")
    p.add_argument("--target", required=True)
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--spec", required=True)
    p.add_argument("--log")
    p.add_argument("--rt-priority", type=int, default=DEFAULT_RT_PRIORITY)
    p.add_argument("--parent", type=int)
    args = p.parse_args(argv)
    if args.parent:
        die_with_parent(args.parent)
    log: IO[str] | None = open(args.log, "a", buffering=1, encoding="utf-8") if args.log else None  # noqa: SIM115
    engine = RelayEngine(_addr(args.target), parse_impair(args.spec), MonotonicClock(), log)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def ready(addr: tuple[str, int]) -> None:
            print(f"listening {addr[0]} {addr[1]}", flush=True)

        await engine.serve(_addr(args.listen), ready, stop)

    try:
        with realtime.scheduling(args.rt_priority):
            asyncio.run(run())
    finally:
        if log is not None:
            log.close()
    print(f"done {engine.connections} {engine.chunks} {len(engine.errors)}", flush=True)
    return 0
