"""The run manifest: every setting, version and host fact needed to reproduce a run.

Secrets never reach it: keys that look like credentials are replaced, URLs lose their
user-info and query strings, and argv values after secret-looking flags are dropped.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from rig import __version__
from rig.clock.timer import wakeup_method

SECRET_KEY = re.compile(r"(key|token|secret|passw|auth|credential|bearer|cookie)", re.I)
URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)
REDACTED = "<redacted>"
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


def redact(obj: Any) -> Any:
    """A copy of a JSON-like object with secret-looking keys and URL credentials removed."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and v else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str) and URL.match(obj):
        from rig.transports.websocket import redact_url

        return redact_url(obj)
    return obj


def redact_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and SECRET_KEY.search(flag):
            out.append(f"{flag}={REDACTED}" if eq else flag)
            hide_next = not eq
            continue
        out.append(redact(arg))
    return out


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
