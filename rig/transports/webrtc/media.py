"""One Opus stream each way over an aiortc peer connection, without aiortc's media tasks.

aiortc keeps what it is good at: ICE, DTLS, SRTP keys and protection, RTCP timing and
routing, SDP. What it does per 20 ms frame is replaced, because the rig already paces,
encodes and stamps each frame itself and aiortc's generic path cost several times the codec:
a sender task woken per frame to build an `RtpPacket` object, a receiver that stamps
`datetime`s, a jitter buffer that rescans its ring per packet, and a decoder thread whose
every frame comes back through `run_coroutine_threadsafe`.

How this works, with public aiortc objects and instance-level wrappers only (no fork, no
patched classes):
- `bind(transceiver)` gives the sender a `SilentTrack` (aiortc's sender task waits on it
  forever, costing nothing), and wraps the sender's `send(parameters)` to learn the
  negotiated payload type, SSRC and MID, and its `_send_rtcp` so every RTCP sender report
  aiortc schedules (every 0.5-1.5 s) is rewritten from the rig's own counters: NTP (wall
  clock, `rig.clock.wall`) and RTP time of the same instant (the RTP time extrapolated from
  the least-late packet sent, so a late frame does not shift the mapping), plus a report
  block about the incoming stream with LSR/DLSR measured on the shared clock. The
  receiver's `receive(parameters)` is wrapped to learn which payload types are Opus.
- `attach(dtls)` wraps the DTLS transport and the ICE connection under it: an incoming
  SRTP packet of the Opus payload types (readable in the clear header) is taken in the
  datagram callback itself, before aioice's queue: stamped (shared clock), unprotected,
  counted (`RtpReceiveStats`) and filed in the rig's `JitterBuffer`, with no queue, no task
  wake-up and no coroutine per packet (aiortc's path costs three loop callbacks, a failed
  STUN parse and a `datetime` per packet). Released frames go to `on_frames` undecoded (the
  caller decodes off the packet path). Everything else (DTLS, RTCP, other payload types,
  packets before SRTP is keyed) takes aiortc's path as before; RTCP both ways feeds
  `RtcpLedger`.
- `send(payload)` packs the RTP header (`RtpPacketizer`), protects it with the DTLS
  transport's outbound SRTP session and calls `sendto` on the nominated ICE pair's datagram
  transport, all synchronously in the caller's task: no queue, no task switch, no chain of
  coroutines. It returns the shared-clock time `sendto` returned, the uplink send time.
  (aiortc's own byte/packet counters for the DTLS transport do not see these packets.)
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pylibsrtp
from aiortc import RTCRtpTransceiver
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtp import (
    AnyRtcpPacket,
    RtcpPacket,
    RtcpReceiverInfo,
    RtcpSenderInfo,
    RtcpSrPacket,
    is_rtcp,
)

from rig.clock.base import Clock
from rig.clock.wall import wall_ns
from rig.core.units import NS_PER_S
from rig.errors import TransportError
from rig.transports.webrtc.codec import FRAME_SAMPLES, OPUS_RATE
from rig.transports.webrtc.rtp import (
    BufferedFrame,
    JitterBuffer,
    RtpPacketizer,
    RtpReceiveStats,
    parse_rtp,
)
from rig.transports.webrtc.stats import RtcpLedger, unix_ns_to_ntp

MID_URI = "urn:ietf:params:rtp-hdrext:sdes:mid"

RtcpEvents = Callable[[list[tuple[str, dict[str, Any], float | None]], int], None]


class SilentTrack(MediaStreamTrack):
    """A sending track that never yields: `DirectAudio.send` carries the media instead."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._ended = asyncio.Event()

    async def recv(self) -> Any:
        await self._ended.wait()
        raise MediaStreamError

    def stop(self) -> None:
        self._ended.set()
        super().stop()


class DirectAudio:
    """Opus RTP both ways on one peer connection, stamped on the shared clock."""

    def __init__(
        self,
        clock: Clock,
        *,
        jitter_prefetch: int = 4,
        on_frames: Callable[[list[BufferedFrame]], None] | None = None,
        on_rtcp_events: RtcpEvents | None = None,
    ) -> None:
        self.clock = clock
        self.on_frames = on_frames
        self.on_rtcp_events = on_rtcp_events
        self.ledger = RtcpLedger(OPUS_RATE)
        self.stats = RtpReceiveStats(OPUS_RATE)
        self.jitter = JitterBuffer(jitter_prefetch)
        self.track = SilentTrack()
        self.packetizer: RtpPacketizer | None = None
        self.remote_ssrc: int | None = None
        self.remote_origin: int | None = None  # RTP timestamp of the first incoming packet
        self.rtp_received = 0
        self.foreign_rtp = 0  # RTP of other payload types, left to aiortc
        self.srtp_errors = 0  # incoming packets SRTP refused (replayed, forged, bad keys)
        self.fast_rtp = 0  # packets taken in the datagram callback, before aioice's queue
        self._recv_pts: set[int] = set()
        self._send_rtp: Callable[[bytes], Awaitable[None]] | None = None
        self._dtls: RTCDtlsTransport | None = None
        self._ice: Any = None  # the aioice Connection under the DTLS transport
        self._first_ts: int | None = None  # RTP timestamp of our first packet
        self._samples_sent = 0
        self._rtp_zero_ns: int | None = None  # shared-clock time of _first_ts (least-late)
        self._attached: set[int] = set()
        self.negotiated = asyncio.Event()  # set once aiortc started our sender

    # --- wiring ---------------------------------------------------------------------------

    def bind(self, transceiver: RTCRtpTransceiver) -> None:
        """Before negotiation: take over the transceiver's media (see the module docstring)."""
        sender, receiver = transceiver.sender, transceiver.receiver
        sender.replaceTrack(self.track)
        send, send_rtcp, receive = sender.send, sender._send_rtcp, receiver.receive

        async def sender_send(parameters: Any) -> None:
            codec = parameters.codecs[0]
            ext = [
                (h.id, parameters.muxId.encode())
                for h in parameters.headerExtensions
                if h.uri == MID_URI and parameters.muxId
            ]
            self.packetizer = RtpPacketizer(
                sender._ssrc,
                codec.payloadType,
                sequence=random.randrange(0x8000),
                timestamp=random.getrandbits(32),
                extensions=ext,
            )
            self.negotiated.set()
            await send(parameters)

        async def sender_rtcp(packets: list[AnyRtcpPacket]) -> None:
            out = [self.sender_report() if isinstance(p, RtcpSrPacket) else p for p in packets]
            await send_rtcp(out)

        async def receiver_receive(parameters: Any) -> None:
            self._recv_pts |= {
                c.payloadType for c in parameters.codecs if c.mimeType.lower() == "audio/opus"
            }
            await receive(parameters)

        sender.send = sender_send  # type: ignore[method-assign]
        sender._send_rtcp = sender_rtcp  # type: ignore[method-assign]
        receiver.receive = receiver_receive  # type: ignore[method-assign]

    def attach(self, dtls: RTCDtlsTransport) -> None:
        """Wrap one DTLS transport's RTP/RTCP paths (once; instance attributes only)."""
        if id(dtls) in self._attached:
            return
        self._attached.add(id(dtls))
        send_rtp, handle_rtp, handle_rtcp = (
            dtls._send_rtp,
            dtls._handle_rtp_data,
            dtls._handle_rtcp_data,
        )
        self._send_rtp = send_rtp
        self._dtls = dtls
        ice = self._ice = dtls.transport._connection
        queue_datagram = ice.data_received
        recv_pts = self._recv_pts

        def datagram(data: bytes, component: int) -> None:
            # SRTP keeps the RTP header in the clear: our Opus packets are recognised before
            # unprotecting, so anything else goes to aiortc still protected, as it came
            srtp = dtls._rx_srtp
            if (
                srtp is not None
                and len(data) > 12
                and 127 < data[0] < 192
                and (data[1] & 0x7F) in recv_pts
                and not 191 < data[1] < 209  # RTCP (SR 200 ... shares the byte)
            ):
                t_ns = self.clock.now_ns()
                try:
                    plain = srtp.unprotect(data)
                except pylibsrtp.Error:
                    self.srtp_errors += 1
                    return
                self.fast_rtp += 1
                self._on_rtp(plain, t_ns)
                return
            queue_datagram(data, component)

        ice.data_received = datagram  # type: ignore[method-assign]

        async def tapped_send(data: bytes) -> None:
            await send_rtp(data)
            if is_rtcp(data):
                with contextlib.suppress(ValueError):
                    self.ledger.on_sent(RtcpPacket.parse(data), self.clock.now_ns())

        async def tapped_rtp(data: bytes, arrival_time_ms: int) -> None:
            # packets that came through aioice's queue (before SRTP was keyed, or foreign)
            if not self._on_rtp(data, self.clock.now_ns()):
                self.foreign_rtp += 1
                await handle_rtp(data, arrival_time_ms)

        async def tapped_rtcp(data: bytes) -> None:
            t_ns = self.clock.now_ns()
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

    # --- uplink ---------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.packetizer is not None and self._send_rtp is not None

    async def send(self, payload: bytes, samples: int = FRAME_SAMPLES) -> int:
        """Send one Opus packet now; returns the shared-clock time it was handed to the OS."""
        pz, send_rtp = self.packetizer, self._send_rtp
        if pz is None or send_rtp is None:
            raise TransportError("WebRTC media is not negotiated yet")
        dtls = self._dtls
        assert dtls is not None
        srtp = dtls._tx_srtp
        if srtp is None or dtls.state != "connected":
            raise TransportError(f"WebRTC send failed: DTLS transport is {dtls.state}")
        if self._first_ts is None:
            self._first_ts = pz.timestamp
        self._sendto(srtp.protect(pz.packet(payload, samples, marker=pz.packets == 0)))
        t_ns = self.clock.now_ns()
        # where RTP time zero lies on the shared clock, from the least-late packet so far: the
        # pacer is never early, so the smallest offset is the closest to its timeline
        zero = t_ns - self._samples_sent * NS_PER_S // OPUS_RATE
        if self._rtp_zero_ns is None or zero < self._rtp_zero_ns:
            self._rtp_zero_ns = zero
        self._samples_sent += samples
        return t_ns

    def _sendto(self, data: bytes) -> None:
        """One protected datagram out on the nominated ICE pair, synchronously."""
        pair = self._ice._nominated.get(1) if self._ice is not None else None
        if pair is None:
            raise TransportError("WebRTC send failed: no nominated ICE pair")
        try:
            pair.protocol.transport.sendto(data, pair.remote_addr)
        except (OSError, AttributeError) as exc:  # AttributeError: the pair's socket is gone
            raise TransportError(f"WebRTC send failed: {exc}") from exc

    def sender_report(self) -> RtcpSrPacket:
        """An SR whose NTP and RTP times name the same instant, with our report block."""
        pz = self.packetizer
        assert pz is not None
        t_ns = self.clock.now_ns()
        ntp = unix_ns_to_ntp(wall_ns())  # the NTP field is wall time by definition
        rtp_ts = pz.timestamp
        if self._first_ts is not None and self._rtp_zero_ns is not None:
            elapsed = (t_ns - self._rtp_zero_ns) * OPUS_RATE // NS_PER_S
            rtp_ts = (self._first_ts + elapsed) & 0xFFFF_FFFF
        info = RtcpSenderInfo(ntp, rtp_ts, pz.packets & 0xFFFF_FFFF, pz.octets & 0xFFFF_FFFF)
        report = self.report_block(t_ns)
        return RtcpSrPacket(pz.ssrc, info, [report] if report is not None else [])

    def report_block(self, t_ns: int) -> RtcpReceiverInfo | None:
        """RFC 3550 report block about the incoming stream (LSR/DLSR on the shared clock)."""
        if self.remote_ssrc is None:
            return None
        lsr = dlsr = 0
        m = self.ledger.mappings.get(self.remote_ssrc)
        if m is not None:
            lsr = m.lsr
            dlsr = max(0, min(0xFFFF_FFFF, ((t_ns - m.t_ns) << 16) // NS_PER_S))
        s = self.stats
        return RtcpReceiverInfo(
            ssrc=self.remote_ssrc,
            fraction_lost=s.take_fraction_lost(),
            packets_lost=s.lost,
            highest_sequence=s.extended_max & 0xFFFF_FFFF,
            jitter=s.jitter,
            lsr=lsr,
            dlsr=dlsr,
        )

    # --- downlink -------------------------------------------------------------------------

    def _on_rtp(self, data: bytes, t_ns: int) -> bool:
        """One unprotected RTP packet that arrived at `t_ns`; False when it is not ours."""
        try:
            h = parse_rtp(data)
        except ValueError:
            return True  # not RTP: nothing for aiortc either
        if h.payload_type not in self._recv_pts:
            return False
        self._on_media(
            h.sequence, h.timestamp, h.ssrc, data[h.payload_offset : h.payload_end], t_ns
        )
        return True

    def _on_media(self, seq: int, rtp_ts: int, ssrc: int, payload: bytes, t_ns: int) -> None:
        if self.remote_ssrc is None:
            self.remote_ssrc, self.remote_origin = ssrc, rtp_ts
        elif ssrc != self.remote_ssrc:
            return  # one incoming audio stream per connection
        self.rtp_received += 1
        self.stats.add(seq, rtp_ts, t_ns)
        frames = self.jitter.add(seq, rtp_ts, payload, t_ns)
        if frames and self.on_frames is not None:
            self.on_frames(frames)

    def describe(self) -> dict[str, Any]:
        return {
            "jitter_prefetch": self.jitter.prefetch,
            "rtp": "direct (rig-paced; sendto and the datagram callback, past aioice's queue)",
        }
