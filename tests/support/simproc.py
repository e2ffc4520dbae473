"""`rig sim` as a subprocess for end-to-end tests: start it on a free port, get its URL."""

from __future__ import annotations

import re
import signal
import subprocess
import sys


def start_sim(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `rig sim --port 0 ARGS...`; returns the process and its ws:// URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rig", "sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"ws://\S+", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"rig sim did not start: {line!r}")
    return proc, m.group(0)


def stop_sim(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
