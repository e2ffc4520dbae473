"""`rig proxy` as a subprocess for end-to-end tests: start it on a free port, stop it with
SIGINT (it finishes every connection's metrics and the manifest first)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys


def start_proxy(upstream: str, out: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `rig proxy --listen 127.0.0.1:0 --upstream URL --out OUT ARGS...`; returns the
    process and the ws:// URL clients connect to."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rig", "proxy", "--listen", "127.0.0.1:0",
         "--upstream", upstream, "--out", out, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"ws://[\d.:]+", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"rig proxy did not start: {line!r} {proc.stdout.read()[-2000:]}")
    return proc, m.group(0)


def stop_proxy(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """SIGINT, wait for the proxy to finish; its remaining output."""
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"rig proxy did not stop in {timeout_s} s: {out[-2000:]}") from None
    return out
