"""`rig sim --transport webrtc`: the reference system as a WebRTC peer (aiortc).

Same brain (`SimEngine`), knobs, server clock and truth log as the WebSocket shell; only the
media path differs. Signalling is a tiny HTTP/1.1 server on the given host (no aiohttp):

    POST /offer       WHIP style: SDP offer body -> 201, SDP answer, Location: /session/<n>
    POST /api/offer   Pipecat SmallWebRTC style: {"sdp", "type"} -> {"sdp", "type", "pc_id"}
    DELETE /session/<n>

Per connection (media through `DirectAudio`, the rig's own RTP path, so the far end costs
little CPU and a self-test on one machine measures the rig, not the reference system):
  uplink    every RTP packet is stamped where it is read from the socket, decoded with the
            sim's own Opus decoder right away (no jitter buffer: the "model" hears audio at
            network arrival, as over WebSocket), held by the uplink delay line, then fed to
            the engine.
  downlink  a continuous 20 ms Opus stream on the sim's own absolute grid: frame k carries
            the audio scheduled in [T0 + k*20 ms, T0 + (k+1)*20 ms) (silence when idle) and is
            encoded and sent at the end of that window. Reply chunks land in that timeline at
            their due time (after the downlink delay line). The first audible frame of a reply
            writes `reply_wire` to the truth log: `onset_wire_ns` = the time its RTP packet
            was handed to the OS + the onset's offset inside the frame.
Data channels the client opens get the engine's events as JSON (`speech_started`,
`speech_stopped`, `response.start`, `response.end`, `response.cancelled`, with the sim's
`server_ts_ms`), like the WebSocket sim's text messages; `ping` keep-alives are ignored.
Truth events: server_start, conn_open, recv_chunk, speech_start/_end, reply_scheduled,
reply_start/_end/_cancel, reply_wire, rtcp_rtt (the sim's own RTT from the rig's RRs),
conn_close. Everything runs at 48 kHz (Opus): the engine is configured at 48 kHz.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
from typing import Any

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rig import safejson
from rig.audio.pcm import Pcm16
from rig.clock.base import NS_PER_S, Clock
from rig.errors import TransportError
from rig.sim.engine import SimConfig, SimEngine, Truth
from rig.sim.netdelay import DelayLine
from rig.sim.server import NetConfig, SimHost
from rig.transports.webrtc.codec import (
    FRAME_SAMPLES,
    OPUS_RATE,
    OpusFrameDecoder,
    OpusFrameEncoder,
)
from rig.transports.webrtc.media import DirectAudio
from rig.transports.webrtc.peer import gather_on, make_peer
from rig.transports.webrtc.rtp import BufferedFrame

SIM_OPUS_COMPLEXITY = 2
"""The sim's downlink encoder: cheap (about 70% of complexity 5's CPU) with the same onset
fidelity; complexity 0 would smear noisy onsets up to 14 ms early (docs/webrtc.md)."""

FRAME_NS = FRAME_SAMPLES * NS_PER_S // OPUS_RATE


_CHANNEL_EVENTS = {
    "speech_start": "speech_started",
    "speech_end": "speech_stopped",
    "reply_start": "response.start",
    "reply_end": "response.end",
    "reply_cancel": "response.cancelled",
}


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if isinstance(v, int | float | str | bool | None)}


class WebRtcSimServer(SimHost):
    def __init__(
        self,
        cfg: SimConfig,
        net: NetConfig | None = None,
        *,
        truth_log: str | None = None,
        reply_audio: Pcm16 | None = None,
        clock: Clock | None = None,
        media_relay: Any = None,
    ) -> None:
        if cfg.sample_rate != OPUS_RATE:
            cfg = dataclasses.replace(cfg, sample_rate=OPUS_RATE)
        super().__init__(cfg, net, truth_log=truth_log, reply_audio=reply_audio, clock=clock)
        self._server: asyncio.Server | None = None
        self.sessions: dict[int, _RtcSession] = {}
        self.host = "127.0.0.1"
        #: a UDP impairment relay (rig.relay.udpprocess.UdpRelay) every session's media crosses
        self.media_relay = media_relay

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self.host = host
        self._server = await asyncio.start_server(self._http, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.log_start(host, transport="webrtc")
        return f"http://{host}:{self.port}/offer"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for s in list(self.sessions.values()):
            await s.close()
        self.truth.close()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    # --- HTTP ------------------------------------------------------------------------------

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
            }
            n = int(headers.get("content-length", "0"))
            if n > 1 << 20:
                raise ValueError("body too large")
            body = b""
            if n:
                async with asyncio.timeout(10):
                    body = await reader.readexactly(n)
            status, ctype, out, extra = await self._route(method, path, headers, body)
        except (ValueError, asyncio.IncompleteReadError, TimeoutError) as exc:
            status, ctype, out, extra = 400, "text/plain", str(exc).encode(), {}
        except Exception as exc:  # noqa: BLE001 - an HTTP 500, logged as a sim error
            self.state.errors.append(f"{type(exc).__name__}: {exc}")
            status, ctype, out, extra = 500, "text/plain", str(exc).encode(), {}
        reason = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request"}.get(
            status, "Error"
        )
        hdrs = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}"]
        hdrs += [f"{k}: {v}" for k, v in extra.items()]
        hdrs += [f"Content-Length: {len(out)}", "Connection: close", "", ""]
        writer.write("\r\n".join(hdrs).encode("latin-1") + out)
        with contextlib.suppress(OSError):
            await writer.drain()
            writer.close()
            await writer.wait_closed()

    async def _route(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes, dict[str, str]]:
        if method == "POST" and path.split("?")[0] == "/offer":
            conn, answer = await self._accept(body.decode("utf-8"))
            return 201, "application/sdp", answer.encode(), {"Location": f"/session/{conn}"}
        if method == "POST" and path.split("?")[0] == "/api/offer":
            conn, answer = await self._accept(offer_sdp(body))
            out = json.dumps({"sdp": answer, "type": "answer", "pc_id": f"sim-{conn}"})
            return 200, "application/json", out.encode(), {}
        if method == "DELETE" and path.startswith("/session/"):
            s = self.sessions.get(int(path.rsplit("/", 1)[1]))
            if s is not None:
                await s.close()
            return 204, "text/plain", b"", {}
        return 404, "text/plain", b"not found", {}

    async def _accept(self, offer_sdp: str) -> tuple[int, str]:
        conn = next(self._ids)
        self.state.connections += 1
        self.state.active += 1
        session = _RtcSession(self, conn)
        self.sessions[conn] = session
        answer = await session.answer(offer_sdp)
        return conn, answer


class _RtcSession:
    def __init__(self, server: WebRtcSimServer, conn: int) -> None:
        self.s = server
        self.conn = conn
        rng = random.Random(server.net.seed * 1_000_003 + conn)
        self.up_line = DelayLine(server.net.delay_up_ms, server.net.jitter_ms, rng)
        self.down_line = DelayLine(server.net.delay_down_ms, server.net.jitter_ms, rng)
        self.engine = SimEngine(server.cfg, server.reply_audio)
        self.pc: RTCPeerConnection = make_peer([])
        self.media = DirectAudio(
            server.clock, jitter_prefetch=0, on_frames=self._on_frames, on_rtcp_events=self._on_rtcp
        )
        self.encoder = OpusFrameEncoder(complexity=SIM_OPUS_COMPLEXITY)
        self.decoder = OpusFrameDecoder()
        self.up_q: asyncio.Queue[tuple[int, int, Pcm16, int] | None] = asyncio.Queue()
        self.tasks: list[asyncio.Task[Any]] = []
        self.closed = False
        self.t_start_ns = 0
        self.frames_out = 0
        self.pending: list[tuple[int, Pcm16, int, int]] = []  # (sample, pcm, response, seq)
        self.up_seq = 0
        self.started = False
        self._started: set[int] = set()
        self.channels: list[Any] = []
        self.route: Any = None  # the impairment relay's route, when --impair

    def now(self) -> int:
        return self.s.clock.now_ns()

    def sms(self, t_ns: int) -> float:
        return self.s.server_clock.ms(t_ns)

    async def answer(self, offer_sdp: str) -> str:
        pc = self.pc

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            self.tasks.append(asyncio.create_task(self._drain(track)))

        @pc.on("datachannel")
        def on_channel(ch: Any) -> None:
            self.channels.append(ch)

            @ch.on("message")  # type: ignore[untyped-decorator]
            def on_message(message: str | bytes) -> None:
                if isinstance(message, str) and message.startswith("ping"):
                    return
                self.s.truth.write("datachannel", self.now(), conn=self.conn, label=ch.label)

        @pc.on("connectionstatechange")
        async def on_state() -> None:
            self.s.truth.write("pc_state", self.now(), conn=self.conn, state=pc.connectionState)
            if pc.connectionState == "connected" and not self.started:
                self.started = True
                self._start()
            elif pc.connectionState in ("failed", "closed"):
                await self.close()

        route = None
        if self.s.media_relay is not None:  # --impair: media through the UDP relay
            route = self.route = self.s.media_relay.answer_route(self.s.host)
            offer_sdp = await route.route_offer_in(offer_sdp)
        await pc.setRemoteDescription(RTCSessionDescription(offer_sdp, "offer"))
        pc.addTrack(self.media.track)
        audio = [tr for tr in pc.getTransceivers() if tr.kind == "audio"]
        if not audio:
            raise ValueError("the offer has no audio")
        self.media.bind(audio[0])
        answer = await pc.createAnswer()
        with gather_on([self.s.host]):
            await pc.setLocalDescription(answer)
        self.media.attach(audio[0].sender.transport)
        self.s.truth.write("conn_open", self.now(), conn=self.conn, transport="webrtc")
        sdp = str(pc.localDescription.sdp)
        return sdp if route is None else str(await route.route_answer_out(sdp))

    def _start(self) -> None:
        self.t_start_ns = self.now()
        self.tasks.append(asyncio.create_task(self._uplink()))
        self.tasks.append(asyncio.create_task(self._downlink()))

    async def _drain(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                await track.recv()

    # --- uplink ----------------------------------------------------------------------------

    def _on_frames(self, frames: list[BufferedFrame]) -> None:
        for f in frames:
            pcm = self.decoder.decode(f.payload)
            if pcm.size:
                self.up_q.put_nowait(
                    (self.up_line.release_ns(f.arrival_ns), f.arrival_ns, pcm, f.rtp_ts)
                )

    async def _uplink(self) -> None:
        while True:
            item = await self.up_q.get()
            if item is None:
                return
            release, t_wire, pcm, rtp_ts = item
            await self.s.clock.sleep_until(release)
            t = self.now()
            self.s.truth.write(
                "recv_chunk",
                t,
                conn=self.conn,
                seq=self.up_seq,
                n_samples=int(pcm.size),
                t_wire_ns=t_wire,
                rtp_ts=rtp_ts,
                server_ts_ms=self.sms(t),
            )
            self.up_seq += 1
            for truth in self.engine.on_audio(pcm, t):
                self._log(truth)

    # --- downlink --------------------------------------------------------------------------

    async def _downlink(self) -> None:
        await self.media.negotiated.wait()  # aiortc starts the sender just after DTLS connects
        k = 0
        while True:
            t_tick = self.t_start_ns + (k + 1) * FRAME_NS
            await self.s.clock.sleep_until(t_tick)
            emits, truths = self.engine.poll(self.now())
            for truth in truths:
                self._log(truth)
            for e in emits:
                release = self.down_line.release_ns(e.t_ns)
                self.engine.said(release, e.pcm)
                sample = round((release - self.t_start_ns) * OPUS_RATE / NS_PER_S)
                self.pending.append((sample, e.pcm, e.response, e.seq))
            frame, onset = self._frame(k)
            for payload in self.encoder.encode(frame):
                try:
                    t_wire = await self.media.send(payload)
                except TransportError:
                    return  # the connection is gone; close() follows from its state change
                if onset is not None:
                    self._reply_wire(k, *onset, t_wire)
            k += 1

    def _frame(self, k: int) -> tuple[Pcm16, tuple[int, int] | None]:
        """Mix the pending reply audio that falls in frame k; (response, offset) of an onset."""
        lo, hi = k * FRAME_SAMPLES, (k + 1) * FRAME_SAMPLES
        frame = np.zeros(FRAME_SAMPLES, np.int16)
        keep: list[tuple[int, Pcm16, int, int]] = []
        onset: tuple[int, int] | None = None
        for sample, pcm, resp, seq in self.pending:
            start = max(sample, lo)  # late chunks go out as soon as possible
            if start >= hi:
                keep.append((sample, pcm, resp, seq))
                continue
            n = min(pcm.size, hi - start)
            frame[start - lo : start - lo + n] = pcm[:n]
            if resp not in self._started and np.any(pcm[:n]):
                self._started.add(resp)
                loud = int(np.flatnonzero(pcm[:n])[0])
                if onset is None:
                    onset = (resp, start - lo + loud)
            if n < pcm.size:
                keep.append((start + n, pcm[n:], resp, seq))
        self.pending = keep
        return frame, onset

    def _reply_wire(self, k: int, resp: int, offset: int, t_ns: int) -> None:
        """Truth: the packet holding a reply's first audible sample left at `t_ns`."""
        self.s.truth.write(
            "reply_wire",
            t_ns,
            conn=self.conn,
            response=resp,
            frame=k,
            offset_samples=offset,
            frame_wire_ns=t_ns,
            onset_wire_ns=t_ns + offset * NS_PER_S // OPUS_RATE,
            frame_due_ns=self.t_start_ns + (k + 1) * FRAME_NS,
        )

    def _on_rtcp(self, events: list[tuple[str, dict[str, Any], float | None]], t_ns: int) -> None:
        for kind, data, _ in events:
            if kind == "rtcp.rr" and data.get("rtt_ms") is not None:
                self.s.truth.write("rtcp_rtt", t_ns, conn=self.conn, rtt_ms=data["rtt_ms"])

    def _log(self, truth: Truth) -> None:
        self.s.truth.write(
            truth.event, truth.t_ns, conn=self.conn, server_ts_ms=self.sms(truth.t_ns), **truth.data
        )
        kind = _CHANNEL_EVENTS.get(truth.event)
        if kind is not None:
            self._announce(kind, truth)

    def _announce(self, kind: str, truth: Truth) -> None:
        """Tell the client on every open data channel, as the WebSocket sim does in text."""
        msg = json.dumps(
            {"type": kind, "server_ts_ms": self.sms(truth.t_ns), **_jsonable(truth.data)}
        )
        for ch in self.channels:
            if ch.readyState == "open":
                ch.send(msg)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.up_q.put_nowait(None)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.media.track.stop()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.pc.close()
        if self.route is not None:
            await self.route.close()
        self.s.state.active -= 1
        self.s.sessions.pop(self.conn, None)
        self.s.truth.write("conn_close", self.now(), conn=self.conn)


def offer_sdp(body: bytes) -> str:
    """The SDP of a pipecat-style JSON offer (`{"sdp": ..., "type": "offer"}`); a ValueError
    (answered 400) for anything else: bad JSON through rig.safejson, a wrong shape."""
    obj = safejson.parse(body, max_bytes=1 << 20)
    sdp = obj.get("sdp") if isinstance(obj, dict) else None
    if not isinstance(sdp, str):
        raise ValueError("the offer is not a JSON object with an sdp string")
    return sdp
