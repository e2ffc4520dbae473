"""WebRTC transport: one aiortc peer connection to a system, paced by the rig.

Uplink: `send_audio` encodes the frame (libopus, `codec.OpusFrameEncoder`) and sends its RTP
packet through SRTP and ICE in the same task (`media.DirectAudio.send`); the time `sendto`
returned is the send time, so send lateness includes encoding, packetisation and SRTP, and
no queue or task switch sits between the pacer and the socket. With 20 ms frames at 48 kHz
(the default) every frame is one packet; other frame sizes are buffered to 20 ms, and a
frame that completed no packet returns its hand-off time.

Downlink: every RTP packet is stamped on the shared clock in the datagram callback that read
it from our socket, before SRTP (`pkt_arrival_ns`), and filed in the rig's jitter buffer
(`jitter_prefetch` packets, default 4 like aiortc's, so 80 ms at 20 ms packets). A frame's
`t_ns` is its release from that buffer, the moment a buffered listener could play it;
`jb_ms` = release - arrival is recorded per chunk and kept out of the network and system
shares. Frames are decoded when
`receive()` hands them over, off the packet path; `server_ts_ms` maps the RTP timestamp
onto the sender's clock once its first RTCP SR came.

Quiet frames: WebRTC senders stream continuously, silence included. Decoded frames whose
peak is at most `quiet_peak` (default 16, about -66 dBFS) are counted (`quiet_frames`) but
not yielded, so the session's "system quiet" drain rule and the playback queue see gaps as
gaps (arrival placement puts the next audible frame where it arrived). `None` yields all.

RTCP: SR/RR from both directions become `rtcp.sr` / `rtcp.rr` events (RTT, jitter, loss,
NTP<->RTP), and `webrtc.stats` events summarise the path every `stats_interval_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Protocol
from urllib.parse import urlsplit

import soxr
from aiortc import RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcdatachannel import RTCDataChannel

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.core.events import DownAudio, DownEvent, Incoming
from rig.errors import RigError, TransportError
from rig.transports.base import Transport
from rig.transports.webrtc.codec import OPUS_RATE, OpusFrameDecoder, OpusFrameEncoder
from rig.transports.webrtc.media import DirectAudio
from rig.transports.webrtc.peer import gather_on, is_loopback_host, make_peer
from rig.transports.webrtc.rtp import BufferedFrame
from rig.transports.webrtc.signalling import Signalling
from rig.transports.webrtc.stats import percentile, rtp_diff

OPUS_LOOKAHEAD_SAMPLES = 312
"""libopus encoder lookahead at 48 kHz (6.5 ms): decoded audio trails the source by this."""

_END = object()


class MediaRoute(Protocol):
    """One peer connection's media path through an impairment relay (rig.relay.udpprocess):
    the offer and the answer are rewritten so that every datagram crosses it."""

    async def route_offer(self, offer_sdp: str) -> str: ...

    async def route_answer(self, answer_sdp: str) -> str: ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...


class MediaRelay(Protocol):
    async def open_route(self, target_host: str | None) -> MediaRoute: ...


def peak(pcm: Pcm16) -> int:
    """Largest |sample| (two reductions, no temporary array)."""
    return max(int(pcm.max()), -int(pcm.min())) if pcm.size else 0


def prefer_opus(pc: RTCPeerConnection, transceiver: Any) -> None:
    caps = RTCRtpSender.getCapabilities("audio")
    opus = [c for c in caps.codecs if c.name.lower() == "opus"]
    if opus:
        transceiver.setCodecPreferences(opus)


class WebRtcTransport(Transport):
    """A live WebRTC participant: Opus audio both ways, RTCP stats, optional data channels."""

    def __init__(
        self,
        signalling: Signalling,
        clock: Clock,
        *,
        uplink_rate: int = OPUS_RATE,
        ice_servers: list[str] | None = None,
        host_addresses: list[str] | None = None,
        connect_timeout_s: float = 10.0,
        stats_interval_s: float = 1.0,
        jitter_prefetch: int | None = None,
        open_gate: asyncio.Semaphore | None = None,
        target_host: str | None = None,
        quiet_peak: int | None = 16,
        opus_complexity: int = 5,
        opus_bitrate: int = 64_000,
        media_relay: MediaRelay | None = None,
    ) -> None:
        self.signalling = signalling
        self.clock = clock
        self.uplink_rate = uplink_rate
        self.ice_servers = list(ice_servers or [])
        if (host_addresses is None and is_loopback_host(target_host)) or media_relay:
            host_addresses = ["127.0.0.1"]  # a relay listens on loopback: gather only there
        self.target_host = target_host
        self.media_relay = media_relay
        self.route: MediaRoute | None = None
        self.host_addresses = host_addresses
        self.connect_timeout_s = connect_timeout_s
        self.stats_interval_s = stats_interval_s
        self.jitter_prefetch = jitter_prefetch
        self.quiet_peak = quiet_peak
        self.quiet_frames = 0
        self.open_gate = open_gate
        self.pc: RTCPeerConnection | None = None
        self.encoder = OpusFrameEncoder(opus_bitrate, opus_complexity)
        self.decoder = OpusFrameDecoder()
        self.media = DirectAudio(
            clock,
            jitter_prefetch=4 if jitter_prefetch is None else jitter_prefetch,
            on_frames=self._on_frames,
            on_rtcp_events=self._on_rtcp_events,
        )
        self.ledger = self.media.ledger
        self._resampler = (
            None
            if uplink_rate == OPUS_RATE
            else soxr.ResampleStream(uplink_rate, OPUS_RATE, 1, dtype="int16", quality="HQ")
        )
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._tasks: list[asyncio.Task[Any]] = []
        self._channels: list[RTCDataChannel] = []
        self._connected = asyncio.Event()
        self._failed: str | None = None
        self._opened = False
        self._closed = False
        self.frames_sent = 0
        self.packets_sent = 0
        self.send_cost_ns: deque[int] = deque(maxlen=2000)
        self.jb_ns: deque[int] = deque(maxlen=2000)
        self.down_frames = 0
        self.connect_ms: float | None = None

    # --- open -----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            raise TransportError("a transport opens one session only")
        self._opened = True
        if self.open_gate is not None:
            async with self.open_gate:
                await self._open()
        else:
            await self._open()

    async def _open(self) -> None:
        t0 = self.clock.now_ns()
        pc = self.pc = make_peer(self.ice_servers)
        transceiver = pc.addTransceiver("audio", direction="sendrecv")
        self.media.bind(transceiver)
        prefer_opus(pc, transceiver)
        for label in self.signalling.channels:
            self._add_channel(pc.createDataChannel(label))

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self._tasks.append(asyncio.create_task(self._watch_track(track)))

        @pc.on("connectionstatechange")
        def on_state() -> None:
            state = pc.connectionState
            if state == "connected":
                self._connected.set()
            elif state in ("failed", "closed") and not self._closed:
                self._failed = f"peer connection {state}"
                self._connected.set()
                self._queue.put_nowait(_END)

        try:
            offer = await pc.createOffer()
            with gather_on(self.host_addresses):
                await pc.setLocalDescription(offer)
            offer_sdp = pc.localDescription.sdp
            if self.media_relay is not None:  # every datagram through the impairment relay
                self.route = await self.media_relay.open_route(self.target_host)
                offer_sdp = await self.route.route_offer(offer_sdp)
            answer = await self.signalling.exchange(offer_sdp)
            if self.route is not None:
                answer = await self.route.route_answer(answer)
            await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        except RigError:
            raise
        except (ValueError, OSError) as exc:
            raise TransportError(f"WebRTC negotiation failed: {exc}") from exc
        self.media.attach(transceiver.sender.transport)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await self._connected.wait()
        except TimeoutError:
            raise TransportError(
                f"ICE/DTLS did not connect within {self.connect_timeout_s} s "
                f"(host candidates: {self.host_addresses or 'default'})"
            ) from None
        if self._failed:
            raise TransportError(self._failed)
        try:  # aiortc starts the sender right after DTLS connects, in its own task
            async with asyncio.timeout(self.connect_timeout_s):
                await self.media.negotiated.wait()
        except TimeoutError:
            raise TransportError("connected, but aiortc never started an audio sender") from None
        self.connect_ms = round((self.clock.now_ns() - t0) / 1e6, 3)
        if self.signalling.keepalive is not None:
            self._tasks.append(asyncio.create_task(self._keepalive(*self.signalling.keepalive)))
        if self.stats_interval_s > 0:
            self._tasks.append(asyncio.create_task(self._stats_loop()))
        self._queue.put_nowait(
            DownEvent(
                "webrtc.connected",
                self.clock.now_ns(),
                {"connect_ms": self.connect_ms, **self._pair()},
            )
        )

    def _pair(self) -> dict[str, Any]:
        """The nominated ICE pair (addresses only)."""
        try:
            assert self.pc is not None
            tr = self.pc.getTransceivers()[0]
            conn = tr.sender.transport.transport._connection
            pair = conn._nominated.get(1)
            if pair is None:
                return {}
            return {
                "local": f"{pair.local_candidate.host}:{pair.local_candidate.port}",
                "remote": f"{pair.remote_candidate.host}:{pair.remote_candidate.port}",
            }
        except (AttributeError, IndexError, AssertionError):
            return {}

    def _add_channel(self, ch: RTCDataChannel) -> None:
        self._channels.append(ch)

        @ch.on("message")
        def on_message(message: str | bytes) -> None:
            t_ns = self.clock.now_ns()
            try:
                for item in self.signalling.decode(ch.label, message, t_ns):
                    self._queue.put_nowait(item)
            except RigError as exc:
                self._queue.put_nowait(exc)

        @ch.on("open")
        def on_open() -> None:
            for msg in self.signalling.encode_event("open", {}):
                ch.send(msg)

    # --- uplink ---------------------------------------------------------------------------

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        if self.pc is None or self._failed:
            raise TransportError(self._failed or "not connected")
        t_hand = self.clock.now_ns()
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm)
        t_wire = t_hand
        for payload in self.encoder.encode(pcm):
            t_wire = await self.media.send(payload)
            self.packets_sent += 1
        self.frames_sent += 1
        self.send_cost_ns.append(t_wire - t_hand)
        return t_wire

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        msgs = self.signalling.encode_event(kind, data)
        ch = next((c for c in self._channels if c.readyState == "open"), None)
        for msg in msgs:
            if ch is None:
                raise TransportError(f"no open data channel for {kind!r}")
            ch.send(msg)

    async def _keepalive(self, interval_s: float, message: str) -> None:
        while True:
            for ch in self._channels[:1]:
                if ch.readyState == "open":
                    ch.send(message)
            await asyncio.sleep(interval_s)

    # --- downlink -------------------------------------------------------------------------

    def _on_frames(self, frames: list[BufferedFrame]) -> None:
        for f in frames:  # decoded when receive() hands them over, off the packet path
            self._queue.put_nowait(f)

    def _on_rtcp_events(
        self, events: list[tuple[str, dict[str, Any], float | None]], t_ns: int
    ) -> None:
        for kind, data, server_ms in events:
            self._queue.put_nowait(DownEvent(kind, t_ns, data, server_ms))

    async def _watch_track(self, track: MediaStreamTrack) -> None:
        """aiortc's receiving track carries no media here; it ends when the far end does."""
        with contextlib.suppress(MediaStreamError):
            while True:
                await track.recv()
        self._queue.put_nowait(_END)

    def _audio(self, f: BufferedFrame, pcm: Pcm16, pk: int) -> DownAudio | None:
        """One decoded frame; None when it is quiet (counted, not yielded)."""
        self.down_frames += 1
        if self.quiet_peak is not None and pk <= self.quiet_peak:
            self.quiet_frames += 1
            return None
        self.jb_ns.append(f.release_ns - f.arrival_ns)
        media = self.media
        assert media.remote_origin is not None and media.remote_ssrc is not None
        extra = {
            "pts": rtp_diff(f.rtp_ts, media.remote_origin),
            "rtp_ts": f.rtp_ts,
            "pkt_arrival_ns": f.arrival_ns,
            "jb_ms": round((f.release_ns - f.arrival_ns) / 1e6, 3),
        }
        server_ms = self.ledger.rtp_to_server_ms(media.remote_ssrc, f.rtp_ts)
        return DownAudio(
            pcm,
            OPUS_RATE,
            f.release_ns,
            None if server_ms is None else round(server_ms, 3),
            extra,
        )

    async def _stats_loop(self) -> None:
        while True:
            await asyncio.sleep(self.stats_interval_s)
            self._queue.put_nowait(DownEvent("webrtc.stats", self.clock.now_ns(), self.stats()))

    def stats(self) -> dict[str, Any]:
        cost = [x / 1e6 for x in self.send_cost_ns]
        jb = [x / 1e6 for x in self.jb_ns]
        media = self.media
        return {
            "frames_sent": self.frames_sent,
            "rtp_sent": self.packets_sent,
            "rtp_received": media.rtp_received,
            "rtp_lost": media.stats.lost,
            "rtp_late": media.jitter.late,
            "jitter_ms": round(media.stats.jitter * 1000 / OPUS_RATE, 3),
            "frames_decoded": self.down_frames,
            "quiet_frames": self.quiet_frames,
            "send_cost_ms_p50": percentile(cost, 50),
            "send_cost_ms_p99": percentile(cost, 99),
            "jb_ms_p50": percentile(jb, 50),
            "jb_ms_p95": percentile(jb, 95),
            **self.ledger.summary(),
        }

    async def receive(self) -> AsyncIterator[Incoming]:
        while True:
            item = await self._queue.get()
            if item is _END:
                if self._failed and not self._closed:
                    raise TransportError(self._failed)
                yield DownEvent("transport.closed", self.clock.now_ns(), {"clean": True})
                return
            if isinstance(item, BufferedFrame):
                pcm = self.decoder.decode(item.payload)
                audio = self._audio(item, pcm, peak(pcm))
                if audio is not None:
                    yield audio
                continue
            if isinstance(item, RigError):
                raise item
            yield item

    # --- close ----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.media.track.stop()
        if self.pc is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):
                    await self.pc.close()
        with contextlib.suppress(Exception):
            await self.signalling.close()
        if self.route is not None:
            await self.route.close()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "webrtc",
            "signalling": self.signalling.describe(),
            "codec": "opus/48000",
            "opus": self.encoder.describe(),
            "uplink_rate": self.uplink_rate,
            "ice_servers": [s.split("?")[0] for s in self.ice_servers],
            "host_addresses": self.host_addresses,
            "jitter_prefetch": self.media.jitter.prefetch,
            "quiet_peak": self.quiet_peak,
            "media": "direct RTP (rig-paced), aiortc for ICE/DTLS/SRTP/RTCP",
            "rtp_counts": self.rtp_counts(),
            **({} if self.route is None else {"impair_route": self.route.describe()}),
        }

    def rtp_counts(self) -> dict[str, Any]:
        """The rig's own packet accounting so far: RTP packets sent, and of the incoming
        stream the RFC 3550 counts (received, expected from the sequence numbers, lost) and
        the sequence range they cover (base and extended highest), to match a relay's log."""
        s = self.media.stats
        return {
            "sent": self.packets_sent,
            "received": s.received,
            "expected": s.expected,
            "lost": s.lost,
            "base_seq": s.base_seq,
            "max_seq_ext": s.extended_max if s.base_seq is not None else None,
            "ssrc": self.media.remote_ssrc,
        }


def rtp_age_ms(a: int, b: int) -> float:
    """Milliseconds of media between two RTP timestamps at 48 kHz."""
    return rtp_diff(a, b) * 1000 / OPUS_RATE


def target_host(url: str) -> str | None:
    return urlsplit(url).hostname


__all__ = ["OPUS_LOOKAHEAD_SAMPLES", "WebRtcTransport", "target_host"]
