"""Watching the machine itself while a run streams (`rig run --host-watch`).

Why: a virtual machine's host can stop every CPU for milliseconds at once. The rig's frames
are then late whatever the rig does, and the self-check rightly flags the rollouts hit; the
question a user then has is "was it the machine or the rig?". Observers answer it: one
process per usable CPU, pinned there, at SCHED_FIFO above the rig's loop threads (so the
rig's own load cannot delay them), doing nothing but sleep 1 ms at a time and writing down
every wake that came more than `threshold_ms` late, as an interval on CLOCK_MONOTONIC (the
rig's shared clock). A *host pause* is a span in which every CPU's observer was overdue at
once (rig.analysis.hostpause); the run's report matches flagged rollouts' late frames to them.

Separate processes, not threads: threads would wait on each other's GIL and make one CPU's
pause look like all of them. Each observer dies with the run (rig.childproc), writes whole
lines with one O_APPEND write each (a crash loses nothing already written) and costs ~1 000
wake-ups a second on its CPU (docs/pacing.md, "Was it the machine?").

    python -m rig.hostwatch --cpu 0 --priority 5 --threshold-ms 2 --out cpu0.jsonl --parent PID
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from rig.childproc import set_parent_death_signal
from rig.clock.base import MonotonicClock

_CLOCK = MonotonicClock()  # CLOCK_MONOTONIC: the rig's shared clock

SLEEP_NS = 1_000_000  # one observer wake a millisecond
#: observers wait this long for each other to start (their first line) before a run goes on
START_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 2.0

Interval = tuple[int, int]  # (start_ns, end_ns) on CLOCK_MONOTONIC


@dataclass
class Observed:
    """What the observers saw: per CPU, every overdue wake as an interval."""

    cpus: list[int]
    late: dict[int, list[Interval]]  # cpu -> overdue wakes
    wakes: dict[int, int]  # cpu -> wakes counted (0: the observer ended without saying)
    rt: str  # the scheduling the observers got ("SCHED_FIFO 5", or why not)
    threshold_ms: float
    start_ns: int
    end_ns: int
    errors: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """The watch itself, for host_pauses.json (the intervals go in beside it)."""
        return {
            "cpus": self.cpus,
            "rt": self.rt,
            "threshold_ms": self.threshold_ms,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "wakes": {str(c): n for c, n in self.wakes.items()},
            "overdue_wakes": {str(c): len(v) for c, v in self.late.items()},
            "errors": self.errors,
        }


class HostWatch:
    """The observers of one run: `start()` before the rollouts stream, `stop()` after."""

    def __init__(self, priority: int, threshold_ms: float = 2.0) -> None:
        self.priority = max(1, min(99, priority))
        self.threshold_ms = threshold_ms
        self._dir = ""
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._start_ns = 0

    def start(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="rig-hostwatch-")
        self._start_ns = _CLOCK.now_ns()
        for cpu in sorted(os.sched_getaffinity(0)):
            cmd = [
                sys.executable,
                "-P",
                "-m",
                "rig.hostwatch",
                "--cpu",
                str(cpu),
                "--priority",
                str(self.priority),
                "--threshold-ms",
                repr(self.threshold_ms),
                "--out",
                self._path(cpu),
                "--parent",
                str(os.getpid()),
            ]
            self._procs[cpu] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def ready(self) -> bool:
        """Has every observer said how it runs (or ended: stop() says why)?"""
        for cpu, proc in self._procs.items():
            if proc.poll() is not None:
                continue
            try:
                if os.path.getsize(self._path(cpu)) == 0:
                    return False
            except OSError:
                return False
        return True

    async def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait (without blocking the loop) until the observers watch, at most `timeout_s`."""
        deadline_ns = _CLOCK.now_ns() + int(timeout_s * 1e9)
        while not self.ready() and _CLOCK.now_ns() < deadline_ns:  # noqa: ASYNC110 - files
            await asyncio.sleep(0.01)

    def _path(self, cpu: int) -> str:
        return os.path.join(self._dir, f"cpu{cpu}.jsonl")

    def stop(self) -> Observed:
        end_ns = _CLOCK.now_ns()
        for p in self._procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        errors: list[str] = []
        for cpu, p in self._procs.items():
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                errors.append(f"cpu {cpu}: observer did not stop; killed")
            if p.returncode not in (0, -signal.SIGTERM):
                errors.append(f"cpu {cpu}: observer exited with {p.returncode}")
        observed = read_observed(self._dir, list(self._procs), self.threshold_ms)
        observed.start_ns, observed.end_ns = self._start_ns, end_ns
        observed.errors = errors + observed.errors
        shutil.rmtree(self._dir, ignore_errors=True)
        self._procs.clear()
        return observed


def read_observed(directory: str, cpus: list[int], threshold_ms: float) -> Observed:
    """The observers' files: an unreadable line is skipped and said (never the whole)."""
    late: dict[int, list[Interval]] = {}
    wakes: dict[int, int] = {}
    rts: set[str] = set()
    errors: list[str] = []
    for cpu in cpus:
        late[cpu], wakes[cpu] = [], 0
        try:
            with open(os.path.join(directory, f"cpu{cpu}.jsonl"), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            errors.append(f"cpu {cpu}: no observations ({exc.strerror})")
            continue
        for line in lines:
            try:
                rec = json.loads(line)
                if "late" in rec:
                    a, b = rec["late"]
                    late[cpu].append((int(a), int(b)))
                elif "rt" in rec:
                    rts.add(str(rec["rt"]))
                elif "wakes" in rec:
                    wakes[cpu] = int(rec["wakes"])
            except (ValueError, TypeError, KeyError):
                errors.append(f"cpu {cpu}: unreadable line {line[:60]!r}")
    rt = " / ".join(sorted(rts)) if rts else "unknown (no observer started)"
    return Observed(cpus, late, wakes, rt, threshold_ms, 0, 0, errors)


# --- the observer process ------------------------------------------------------------------


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: object) -> None:
    raise _Stop


def observe(cpu: int, priority: int, threshold_ms: float, out: str) -> int:
    """Sleep 1 ms at a time on `cpu` until SIGTERM; one line per overdue wake."""
    signal.signal(signal.SIGTERM, _on_term)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(rec: dict[str, Any]) -> None:
        os.write(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())

    wakes = 0
    now = _CLOCK.now_ns
    try:
        os.sched_setaffinity(0, {cpu})
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            rt = f"SCHED_FIFO {priority}"
        except (OSError, AttributeError) as exc:
            rt = f"default scheduling (SCHED_FIFO not permitted: {exc})"
        threshold_ns = int(threshold_ms * 1e6)
        sleep_s = SLEEP_NS / 1e9
        line({"cpu": cpu, "rt": rt, "start_ns": now()})
        prev = now()
        while True:
            time.sleep(sleep_s)
            t = now()
            wakes += 1
            if t - prev - SLEEP_NS > threshold_ns:
                line({"late": [prev + SLEEP_NS, t]})
            prev = t
    except _Stop:
        line({"wakes": wakes, "end_ns": now()})
    finally:
        os.close(fd)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rig.hostwatch")
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--priority", type=int, default=5)
    ap.add_argument("--threshold-ms", type=float, default=2.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parent", type=int, default=0, help="exit when this process is gone")
    args = ap.parse_args(argv)
    if args.parent:
        set_parent_death_signal()
        if os.getppid() != args.parent:  # the run ended before the signal was armed
            return 1
    return observe(args.cpu, args.priority, args.threshold_ms, args.out)


if __name__ == "__main__":
    sys.exit(main())
