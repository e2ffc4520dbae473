"""aiortc peer connections for the rig: loopback-safe ICE and taps at the DTLS layer.

ICE: `RTCConfiguration(iceServers=[])` by default, because aiortc's default names a public
STUN server and the rig never talks to the internet unless told. aioice skips 127.0.0.1 when
gathering host candidates; `host_addresses=["127.0.0.1"]` makes this peer gather exactly on
the given addresses. It works through a context variable read by a wrapper around
`aioice.ice.get_host_addresses`, so only gathering done inside `gather_on()` is affected,
never another peer in the same process.

Taps: `PeerTap` wraps one `RTCDtlsTransport`'s send path and its SRTP-decrypted receive
path. It stamps on the clock it is given (the transport's injected one) every RTP packet
our sender hands to the socket (the uplink "send time"), every incoming RTP packet (before
aiortc's jitter buffer and decoder, to measure their delay), and every RTCP packet both
ways for `RtcpLedger`.
"""

from __future__ import annotations

import contextlib
import contextvars
import struct
from collections.abc import Callable, Iterator
from typing import Any

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtp import RtcpPacket, RtpPacket, is_rtcp

from rig.clock.base import Clock
from rig.transports.webrtc.stats import RtcpLedger

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


def rtp_header(data: bytes) -> tuple[int, int, int]:
    """(sequence number, timestamp, ssrc) of a plain RTP packet."""
    seq, ts, ssrc = struct.unpack_from("!HII", data, 2)
    return seq, ts, ssrc


RtpSeen = Callable[[int, int, int, int], None]  # (seq, rtp_ts, ssrc, t_ns)
RtpArrived = Callable[[RtpPacket, int], None]  # (parsed packet, t_ns)


class PeerTap:
    """Shared-clock stamps for what crosses one DTLS transport; feeds an `RtcpLedger`."""

    def __init__(
        self,
        ledger: RtcpLedger,
        *,
        clock: Clock,
        on_rtp_sent: RtpSeen | None = None,
        on_rtp_received: RtpArrived | None = None,
        on_rtcp_events: Callable[[list[tuple[str, dict[str, Any], float | None]], int], None]
        | None = None,
    ) -> None:
        self.ledger = ledger
        self._now_ns = clock.now_ns
        self.on_rtp_sent = on_rtp_sent
        self.on_rtp_received = on_rtp_received
        self.on_rtcp_events = on_rtcp_events
        self.rtp_sent = 0
        self.rtp_received = 0
        self._attached: set[int] = set()

    def attach(self, dtls: RTCDtlsTransport) -> None:
        """Wrap this transport's send and receive paths (once; instance attributes only)."""
        if id(dtls) in self._attached:
            return
        self._attached.add(id(dtls))
        send_rtp = dtls._send_rtp
        handle_rtp = dtls._handle_rtp_data
        handle_rtcp = dtls._handle_rtcp_data

        async def tapped_send(data: bytes) -> None:
            await send_rtp(data)
            t_ns = self._now_ns()
            if is_rtcp(data):
                with contextlib.suppress(ValueError):
                    self.ledger.on_sent(RtcpPacket.parse(data), t_ns)
            elif len(data) >= 12:
                self.rtp_sent += 1
                if self.on_rtp_sent is not None:
                    self.on_rtp_sent(*rtp_header(data), t_ns)

        async def tapped_rtp(data: bytes, arrival_time_ms: int) -> None:
            t_ns = self._now_ns()
            self.rtp_received += 1
            if self.on_rtp_received is not None:
                try:
                    packet = RtpPacket.parse(data, dtls._rtp_header_extensions_map)
                except ValueError:
                    packet = None
                if packet is not None:
                    self.on_rtp_received(packet, t_ns)
            await handle_rtp(data, arrival_time_ms)

        async def tapped_rtcp(data: bytes) -> None:
            t_ns = self._now_ns()
            try:
                packets = RtcpPacket.parse(data)
            except ValueError:
                packets = []
            events = self.ledger.on_received(packets, t_ns)
            if events and self.on_rtcp_events is not None:
                self.on_rtcp_events(events, t_ns)
            await handle_rtcp(data)

        dtls._send_rtp = tapped_send  # type: ignore[method-assign]
        dtls._handle_rtp_data = tapped_rtp  # type: ignore[method-assign]
        dtls._handle_rtcp_data = tapped_rtcp  # type: ignore[method-assign]

    def attach_peer(self, pc: RTCPeerConnection) -> None:
        """Attach to every DTLS transport of `pc`'s transceivers (bundled: usually one)."""
        for tr in pc.getTransceivers():
            self.attach(tr.sender.transport)
