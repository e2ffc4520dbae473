"""The installed `rig` command, run as a user runs it (the console script beside this
Python, so the entry point itself is tested; `python -m rig` where there is none)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def rig_argv() -> list[str]:
    script = Path(sys.executable).with_name("rig")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rig"]


def rig(
    *args: str,
    timeout: float = 90,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*rig_argv(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
