"""`--impair` for `rig run`, `rig proxy` and `rig sim`: one option, one relay (rig.relay.process).

The option is given as its spec text; the relay is made here and started by whoever runs it
(rig.runs.execute for a run).

Standard library only at module level (building the parser must stay light); the relay is
imported when a command actually impairs something.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rig.errors import ConfigError

if TYPE_CHECKING:
    from rig.net.impair import Impairment
    from rig.relay.process import TcpRelay
    from rig.relay.udpprocess import UdpRelay

IMPAIR_HELP = (
    "network conditions between the rig and the system, no root needed: an in-process relay "
    "delays/throttles/loses per direction, e.g. delay=75ms,jitter=10ms,loss=1%%,rate=256kbit; "
    "up:/down: prefixes for one direction; or a profile (lan, broadband, mobile-4g, mobile-3g, "
    "lossy-wifi, intercontinental, satellite-geo) with overrides. Every relayed chunk's delay "
    "and fate goes to impair.jsonl (docs/network.md)"
)


def add_impair_option(p: argparse.ArgumentParser | Any) -> None:
    p.add_argument("--impair", metavar="SPEC", help=IMPAIR_HELP)


def impairment(spec: str | None) -> Impairment | None:
    """The parsed `--impair` (ConfigError on a bad spec), None when not given."""
    if not spec:
        return None
    from rig.net.impair import parse_impair

    return parse_impair(spec)


def target_address(url: str) -> tuple[str, int]:
    """(host, port) a ws:// or wss:// URL connects to."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ConfigError("--impair needs a ws:// or wss:// --target")
    try:
        port = parts.port or (443 if parts.scheme == "wss" else 80)
    except ValueError as exc:
        raise ConfigError(f"--target: {exc}") from None
    return parts.hostname, port


def relay_for(spec: str | None, url: str, transport: str) -> TcpRelay | UdpRelay | None:
    """The (not yet started) relay `--impair SPEC` asks for in front of `url`: a TCP relay
    for WebSocket, a UDP relay on the media path for WebRTC; None without `--impair`."""
    imp = impairment(spec)
    if imp is None:
        return None
    if transport == "webrtc":
        from rig.relay.udpprocess import UdpRelay

        return UdpRelay(imp)
    if transport != "ws":
        raise ConfigError(f"--impair covers --transport ws and webrtc, not {transport}")
    from rig.relay.process import TcpRelay

    host, port = target_address(url)
    return TcpRelay(host, port, imp)


def impair_log_path(run_dir: str) -> str:
    os.makedirs(run_dir, exist_ok=True)
    return os.path.join(run_dir, "impair.jsonl")
