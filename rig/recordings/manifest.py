"""The run manifest: every setting, version and host fact needed to reproduce a run.

Secrets never reach it: keys that look like credentials are replaced, URLs lose their
user-info and query strings, and argv values after secret-looking flags are dropped
(rig.redact, re-exported here).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from rig.clock.timer import wakeup_method
from rig.redact import REDACTED, SECRET_KEY, URL, redact, redact_argv
from rig.version import __version__

LIBRARIES = (
    "numpy",
    "soundfile",
    "soxr",
    "websockets",
    "rich",
    "webrtcvad-wheels",
    "aiortc",
    "av",
    "sounddevice",
    "PyAudio",
    "aiomqtt",
    "matplotlib",
)


def git_sha() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    if out.returncode != 0 or not sha:
        return None
    dirty = subprocess.run(
        ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    ).stdout.strip()
    return f"{sha}-dirty" if dirty else sha


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def build_manifest(
    run_id: str,
    *,
    config: dict[str, Any],
    targets: list[dict[str, Any]],
    seed: int,
    started_ns: int,
    argv: Sequence[str] | None = None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "rig_version": __version__,
        "git_sha": git_sha(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "libraries": library_versions(),
        "seed": seed,
        "argv": redact_argv(list(argv if argv is not None else sys.argv)),
        "config": redact(config),
        "targets": redact(targets),
        "started_utc": utc_now(),
        "started_ns": started_ns,
        "ended_utc": None,
        "ended_ns": None,
        "status": "running",
        "status_counts": {},
        "clock": "CLOCK_MONOTONIC (time.monotonic_ns), integer ns",
        "timer": wakeup_method(),
    }


__all__ = ["REDACTED", "SECRET_KEY", "URL", "build_manifest", "redact", "redact_argv"]
