"""WebRTC transport: one aiortc peer connection to a system, paced by the rig.

Uplink: `send_audio` pushes one frame into `PushedAudioTrack` (aiortc's sender loop takes it,
encodes Opus in a worker thread, sends RTP) and waits until the tap at the DTLS layer sees
the RTP packet carrying it leave for the socket: that shared-clock time is the send time,
so send lateness includes encoding. A frame the encoder holds back (frame sizes that are
not 20 ms) is stamped by the next packet that goes out. If no packet shows up within
`wire_timeout_s`, the hand-off time is returned and counted in `wire_timeouts`.

Downlink: each decoded frame is stamped (`t_ns`) the moment aiortc's receiver track hands it
over. Before that it waited in aiortc's jitter buffer (audio: 4 frames of prefetch, so about
80 ms at 20 ms packets) and decoder thread. The tap stamps the RTP packet's arrival at the
socket, so each `DownAudio.extra` carries `rtp_ts`, `pkt_arrival_ns` and `jb_ms` (jitter
buffer + decode, a rig-local delay kept out of the network and system shares), and
`server_ts_ms` maps the RTP timestamp onto the sender's clock once its first RTCP SR came.

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
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import soxr
from aiortc import RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcdatachannel import RTCDataChannel
from aiortc.rtp import RtpPacket

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.core.events import DownAudio, DownEvent, Incoming
from rig.errors import RigError, TransportError
from rig.transports.base import Transport
from rig.transports.webrtc.peer import PeerTap, gather_on, is_loopback_host, make_peer
from rig.transports.webrtc.signalling import Signalling
from rig.transports.webrtc.stats import RtcpLedger, percentile, rtp_diff
from rig.transports.webrtc.track import OPUS_RATE, PushedAudioTrack

OPUS_LOOKAHEAD_SAMPLES = 312
"""libopus encoder lookahead at 48 kHz (6.5 ms): decoded audio trails the source by this."""

_END = object()


def prefer_opus(pc: RTCPeerConnection, transceiver: Any) -> None:
    caps = RTCRtpSender.getCapabilities("audio")
    opus = [c for c in caps.codecs if c.name.lower() == "opus"]
    if opus:
        transceiver.setCodecPreferences(opus)


def to_mono(frame: Any) -> Pcm16:
    """A decoded av frame (packed s16, mono or stereo) as mono int16."""
    data = frame.to_ndarray()
    channels = len(frame.layout.channels)
    if channels == 1:
        return np.ascontiguousarray(data.reshape(-1), dtype=np.int16)
    return np.ascontiguousarray(data.reshape(-1)[::channels], dtype=np.int16)


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
        wire_timeout_s: float = 0.05,
        stats_interval_s: float = 1.0,
        jitter_prefetch: int | None = None,
        open_gate: asyncio.Semaphore | None = None,
        target_host: str | None = None,
        quiet_peak: int | None = 16,
    ) -> None:
        self.signalling = signalling
        self.clock = clock
        self.uplink_rate = uplink_rate
        self.ice_servers = list(ice_servers or [])
        if host_addresses is None and is_loopback_host(target_host):
            host_addresses = ["127.0.0.1"]
        self.host_addresses = host_addresses
        self.connect_timeout_s = connect_timeout_s
        self.wire_timeout_s = wire_timeout_s
        self.stats_interval_s = stats_interval_s
        self.jitter_prefetch = jitter_prefetch
        self.quiet_peak = quiet_peak
        self.quiet_frames = 0
        self.open_gate = open_gate
        self.pc: RTCPeerConnection | None = None
        self.track = PushedAudioTrack()
        self.ledger = RtcpLedger(OPUS_RATE)
        self.tap = PeerTap(
            self.ledger,
            clock=clock,
            on_rtp_sent=self._on_rtp_sent,
            on_rtp_received=self._on_rtp_received,
            on_rtcp_events=self._on_rtcp_events,
        )
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
        self._sender_ssrc: int | None = None
        self._waiters: deque[tuple[int, asyncio.Future[int]]] = deque()
        self._push_index = 0
        self._remote_ssrc: int | None = None
        self._remote_origin: int | None = None
        self._arrivals: OrderedDict[int, int] = OrderedDict()
        self.wire_timeouts = 0
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
        transceiver = pc.addTransceiver(self.track, direction="sendrecv")
        prefer_opus(pc, transceiver)
        for label in self.signalling.channels:
            self._add_channel(pc.createDataChannel(label))

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self._tasks.append(asyncio.create_task(self._read_audio(track)))

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
            answer = await self.signalling.exchange(pc.localDescription.sdp)
            await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        except RigError:
            raise
        except (ValueError, OSError) as exc:
            raise TransportError(f"WebRTC negotiation failed: {exc}") from exc
        self.tap.attach_peer(pc)
        self._sender_ssrc = transceiver.sender._ssrc
        if self.jitter_prefetch is not None:
            jb = getattr(transceiver.receiver, "_RTCRtpReceiver__jitter_buffer")  # noqa: B009
            jb._prefetch = self.jitter_prefetch
        try:
            await asyncio.wait_for(self._connected.wait(), self.connect_timeout_s)
        except TimeoutError:
            raise TransportError(
                f"ICE/DTLS did not connect within {self.connect_timeout_s} s "
                f"(host candidates: {self.host_addresses or 'default'})"
            ) from None
        if self._failed:
            raise TransportError(self._failed)
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
            if pcm.size == 0:
                return t_hand
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._push_index, fut))
        self._push_index += 1
        self.track.push(pcm)
        try:
            t_wire = await asyncio.wait_for(asyncio.shield(fut), self.wire_timeout_s)
        except TimeoutError:
            self.wire_timeouts += 1
            return t_hand
        self.send_cost_ns.append(t_wire - t_hand)
        return t_wire

    def _on_rtp_sent(self, seq: int, rtp_ts: int, ssrc: int, t_ns: int) -> None:
        if ssrc != self._sender_ssrc:
            return
        taken = self.track.taken
        while self._waiters and self._waiters[0][0] < taken:
            _, fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(t_ns)

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

    def _on_rtp_received(self, packet: RtpPacket, t_ns: int) -> None:
        rtp_ts, ssrc = packet.timestamp, packet.ssrc
        if self._remote_ssrc is None:
            self._remote_ssrc = ssrc
            self._remote_origin = rtp_ts
        if ssrc != self._remote_ssrc or rtp_ts in self._arrivals:
            return
        self._arrivals[rtp_ts] = t_ns
        while len(self._arrivals) > 512:
            self._arrivals.popitem(last=False)

    def _on_rtcp_events(
        self, events: list[tuple[str, dict[str, Any], float | None]], t_ns: int
    ) -> None:
        for kind, data, server_ms in events:
            self._queue.put_nowait(DownEvent(kind, t_ns, data, server_ms))

    async def _read_audio(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame: Any = await track.recv()
            except MediaStreamError:
                self._queue.put_nowait(_END)
                return
            t_ns = self.clock.now_ns()
            pcm = to_mono(frame)
            extra: dict[str, Any] = {"pts": frame.pts}
            server_ms = None
            if self._remote_origin is not None and frame.pts is not None:
                rtp_ts = (self._remote_origin + int(frame.pts)) & 0xFFFF_FFFF
                extra["rtp_ts"] = rtp_ts
                arrival = self._arrivals.get(rtp_ts)
                if arrival is not None:
                    extra["pkt_arrival_ns"] = arrival
                    extra["jb_ms"] = round((t_ns - arrival) / 1e6, 3)
                    self.jb_ns.append(t_ns - arrival)
                if self._remote_ssrc is not None:
                    server_ms = self.ledger.rtp_to_server_ms(self._remote_ssrc, rtp_ts)
            self.down_frames += 1
            if self.quiet_peak is not None and (
                pcm.size == 0 or int(np.abs(pcm.astype(np.int32)).max()) <= self.quiet_peak
            ):
                self.quiet_frames += 1
                continue
            self._queue.put_nowait(
                DownAudio(
                    pcm,
                    int(frame.sample_rate),
                    t_ns,
                    None if server_ms is None else round(server_ms, 3),
                    extra,
                )
            )

    async def _stats_loop(self) -> None:
        while True:
            await asyncio.sleep(self.stats_interval_s)
            self._queue.put_nowait(DownEvent("webrtc.stats", self.clock.now_ns(), self.stats()))

    def stats(self) -> dict[str, Any]:
        cost = [x / 1e6 for x in self.send_cost_ns]
        jb = [x / 1e6 for x in self.jb_ns]
        return {
            "frames_pushed": self.track.pushed,
            "frames_taken": self.track.taken,
            "frames_dropped": self.track.dropped,
            "rtp_sent": self.tap.rtp_sent,
            "rtp_received": self.tap.rtp_received,
            "frames_decoded": self.down_frames,
            "quiet_frames": self.quiet_frames,
            "wire_timeouts": self.wire_timeouts,
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
        self.track.stop()
        if self.pc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pc.close(), 5.0)
        with contextlib.suppress(Exception):
            await self.signalling.close()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "webrtc",
            "signalling": self.signalling.describe(),
            "codec": "opus/48000",
            "uplink_rate": self.uplink_rate,
            "ice_servers": [s.split("?")[0] for s in self.ice_servers],
            "host_addresses": self.host_addresses,
            "jitter_prefetch": self.jitter_prefetch,
            "quiet_peak": self.quiet_peak,
            "wire_timeout_s": self.wire_timeout_s,
        }


def rtp_age_ms(a: int, b: int) -> float:
    """Milliseconds of media between two RTP timestamps at 48 kHz."""
    return rtp_diff(a, b) * 1000 / OPUS_RATE


def target_host(url: str) -> str | None:
    return urlsplit(url).hostname


__all__ = ["OPUS_LOOKAHEAD_SAMPLES", "WebRtcTransport", "target_host"]
