"""aiortc peer connections for the rig: loopback-safe ICE (media: see media.py).

ICE: `RTCConfiguration(iceServers=[])` by default, because aiortc's default names a public
STUN server and the rig never talks to the internet unless told. aioice skips 127.0.0.1 when
gathering host candidates; `host_addresses=["127.0.0.1"]` makes this peer gather exactly on
the given addresses. It works through a context variable read by a wrapper around
`aioice.ice.get_host_addresses`, so only gathering done inside `gather_on()` is affected,
never another peer in the same process.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection

_HOST_ADDRESSES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "rig_webrtc_host_addresses", default=None
)
_ORIGINAL_GET_HOST_ADDRESSES = aioice.ice.get_host_addresses


def _get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    chosen = _HOST_ADDRESSES.get()
    if chosen is not None:
        return list(chosen)
    return _ORIGINAL_GET_HOST_ADDRESSES(use_ipv4, use_ipv6)


def _install() -> None:
    if aioice.ice.get_host_addresses is not _get_host_addresses:
        aioice.ice.get_host_addresses = _get_host_addresses


@contextlib.contextmanager
def gather_on(addresses: list[str] | None) -> Iterator[None]:
    """ICE host candidates gathered inside this block use exactly `addresses` (None: default)."""
    _install()
    token = _HOST_ADDRESSES.set(addresses)
    try:
        yield
    finally:
        _HOST_ADDRESSES.reset(token)


def is_loopback_host(host: str | None) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or (host or "").startswith("127.")


def make_peer(ice_servers: list[str] | None = None) -> RTCPeerConnection:
    """A peer connection with only the ICE servers given (none by default)."""
    servers = [RTCIceServer(url) for url in (ice_servers or [])]
    return RTCPeerConnection(RTCConfiguration(iceServers=servers))
