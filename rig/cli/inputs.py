"""Checks of what a user types, made before anything streams or any file is written.

A wrong `--target` (an http:// URL, a bare host:port) or a wrong folder given to `rig report`
is a usage error (exit 2) in one line that says what was expected, instead of a run
directory with a failed rollout or an empty report that exits 0. Standard library only
(imported when the parser is built).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from rig.errors import ConfigError


def check_ws_target(url: str) -> None:
    """`--target` of a WebSocket run: ws:// or wss://, with a host. The URL in the message is
    the user's own, redacted as everywhere (userinfo dropped, a query `<redacted>`)."""
    shown = _shown(url)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("ws", "wss"):
        try:
            parts = urlsplit(url)
            host, _ = parts.hostname, parts.port
        except ValueError as exc:
            raise ConfigError(f"--target {shown}: not a valid URL ({exc})") from exc
        if not host:
            raise ConfigError(f"--target {shown}: no host (e.g. ws://127.0.0.1:8765)")
        return
    if scheme in ("http", "https"):
        fix = ("wss" if scheme == "https" else "ws") + url[len(scheme) :]
        raise ConfigError(
            f"--target wants a ws:// or wss:// URL for --transport ws, got {shown} "
            f"(did you mean {_shown(fix)}? http(s):// is for --transport webrtc)"
        )
    if not scheme:
        raise ConfigError(
            f"--target wants a ws:// or wss:// URL, got {shown} (did you mean ws://{shown}?)"
        )
    raise ConfigError(f"--target wants a ws:// or wss:// URL, got {shown}")


def _shown(url: str) -> str:
    from rig.redact import redact_url

    return redact_url(url)


def check_run_dir(path: str) -> None:
    """A folder `rig report` can read: it holds manifest.json or rollouts/. One rollout's
    folder, a folder of WAVs or any other folder is a usage error that says where to look."""
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: not a run directory (no such folder)")
    if os.path.isfile(os.path.join(path, "manifest.json")) or os.path.isdir(
        os.path.join(path, "rollouts")
    ):
        return
    parent = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    if os.path.isfile(os.path.join(path, "metrics.json")) or os.path.isfile(
        os.path.join(path, "events.jsonl")
    ):
        raise ConfigError(
            f"{path}: one rollout's folder, not a run directory: rig report {parent} reports "
            "the run (rig plot takes a rollout's folder)"
        )
    raise ConfigError(
        f"{path}: not a run directory (no manifest.json or rollouts/ in it); runs are "
        "written to recordings/<run_id>/ (rig run --out DIR)"
    )
