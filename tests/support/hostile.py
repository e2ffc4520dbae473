"""Hostile WebSocket servers for the reliability tests (issue #15), reusable test support.

`HostileServer(fault, dialect=...)` speaks enough of a dialect to get a session running (its
handshake, then some good audio), and then does one bad thing, in that dialect's shape:

  nested        a message nested 100,000 deep (JSON dialects; pipecat: in a MessageFrame)
  huge_int      a 5000-digit integer in an event field
  inf_ts        an infinite timestamp: the rig binary header's float64; pipecat's `pts`
                at 2^64-1; JSON dialects `Infinity` in their timestamp field
  nan_event     `NaN` in an event's timestamp (or number) field
  e400_ts       `1e400` in the same field (overflows a float)
  big_ts        `1e300` in the same field (finite, out of any clock's range)
  rate_huge     a downlink rate of 4e9 where the dialect carries one (rig `ready`, gemini
  rate_zero     `mimeType`, pipecat audio frames; OpenAI/Grok session.updated, which their
  rate_bool     dialects ignore: the API fixes 24 kHz), 0, or `true`
  markup        a server error whose text is rich markup `[/] and [bold]x` (gemini: the
                close reason; moshi: a 0x05 error message)
  hangup        the TCP connection dropped mid-stream, no close frame
  flood         1,000 audio messages at once, as fast as the socket takes them
  stop_reading  never reads after the handshake, with a 4 KiB receive buffer: the client's
                sends block once its TCP window and buffers are full

Moshi carries no JSON: its "JSON" faults are Ogg out of sync (nested), a page with a bad
CRC (huge_int), invalid UTF-8 text (nan_event) and an unknown message kind (the timestamp
faults); it has no rate on the wire. Binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import struct
from typing import Any

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve

from rig.dialects import protowire as pw
from rig.dialects.pipecat import F_AUDIO, F_MESSAGE, audio_frame
from rig.protocol import rawpcm

FAULTS = (
    "nested",
    "huge_int",
    "inf_ts",
    "nan_event",
    "e400_ts",
    "big_ts",
    "rate_huge",
    "rate_zero",
    "rate_bool",
    "markup",
    "hangup",
    "flood",
    "stop_reading",
)
DIALECTS = ("rig", "raw", "openai", "grok", "gemini", "pipecat", "moshi")
RATE_FAULTS = {"rate_huge": 4_000_000_000, "rate_zero": 0, "rate_bool": True}
#: faults the handshake itself carries (no audio before them), per dialect (OpenAI and Grok
#: say a rate in session.updated, then send good audio: their dialects ignore it)
HANDSHAKE_FAULTS = {
    "rig": tuple(RATE_FAULTS),
    "raw": tuple(RATE_FAULTS),
}
MARKUP = "[/] and [bold]x"
#: the raw JSON number text each timestamp fault puts in place
NUMBER = {
    "nan_event": "NaN",
    "e400_ts": "1e400",
    "big_ts": "1e300",
    "inf_ts": "Infinity",
    "huge_int": "9" * 5000,
}
#: sample rate of each dialect's good downlink audio
DOWN_RATE = {"openai": 24_000, "grok": 24_000, "gemini": 24_000, "moshi": 24_000}


def _tone(n: int, rate: int) -> np.ndarray:
    t = np.arange(n) / rate
    return (np.sin(2 * np.pi * 300 * t) * 8000).astype(np.int16)


class HostileServer:
    """`async with HostileServer("inf_ts", dialect="openai") as srv: ... srv.url ...`"""

    def __init__(
        self, fault: str, *, dialect: str = "rig", good_frames: int = 10, rate: int = 16_000
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        if dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; known: {', '.join(DIALECTS)}")
        self.fault = fault
        self.dialect = dialect
        self.good_frames = good_frames
        self.rate = DOWN_RATE.get(dialect, rate)
        self.url = ""
        self.sent_frames = 0
        self.connections = 0
        self._server: Server | None = None
        self._granule = 0
        self._ogg: Any = None
        self._packets: list[bytes] | None = None
        self._closing = asyncio.Event()

    async def __aenter__(self) -> HostileServer:
        sock = None
        if self.fault == "stop_reading":
            # a tiny receive buffer (set before listen: accepted sockets inherit it), so the
            # client's sends block after a few frames, not after megabytes
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.bind(("127.0.0.1", 0))
            self._server = await serve(
                self._handle, sock=sock, max_size=None, max_queue=1, close_timeout=1
            )
        else:
            self._server = await serve(self._handle, "127.0.0.1", 0, max_size=None, close_timeout=1)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # --- the dialects' shapes ------------------------------------------------------------

    async def _handshake(self, ws: ServerConnection) -> None:
        """Read the client's opening message(s) and answer so its dialect is ready."""
        d, f = self.dialect, self.fault
        rate: object = RATE_FAULTS.get(f, self.rate)
        if d in ("rig", "raw"):
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "ready", "version": 1, "sample_rate": rate}))
        elif d in ("openai", "grok"):
            await ws.recv()  # session.update
            fmt = {"type": "audio/pcm", "rate": rate}
            session = {"audio": {"input": {"format": fmt}, "output": {"format": fmt}}}
            await ws.send(json.dumps({"type": "session.updated", "session": session}))
        elif d == "gemini":
            await ws.recv()  # setup
            await ws.send(json.dumps({"setupComplete": {}}))
        elif d == "pipecat":
            await ws.recv()  # RTVI client-ready; the dialect is ready without an answer
        elif d == "moshi":
            await ws.send(b"\x00")

    def _audio(self, ts_ms: float | None = 0.0) -> bytes | str:
        """One good 20 ms (moshi: 80 ms) downlink audio message."""
        d = self.dialect
        k = self.sent_frames
        self.sent_frames += 1
        if d == "moshi":
            return b"\x01" + self._moshi_page()
        pcm = _tone(self.rate // 50, self.rate)
        if d == "rig":
            return rawpcm.encode_audio(pcm, k, ts_ms)
        if d == "raw":
            return rawpcm.encode_audio(pcm, k, None, "raw")
        if d == "pipecat":
            return audio_frame(pcm, self.rate)
        data = _b64(pcm)
        if d == "gemini":
            part = {"inlineData": {"mimeType": f"audio/pcm;rate={self.rate}", "data": data}}
            return json.dumps({"serverContent": {"modelTurn": {"parts": [part]}}})
        delta = {"type": "response.output_audio.delta", "response_id": "r1", "item_id": "i1"}
        return json.dumps({**delta, "output_index": 0, "content_index": 0, "delta": data})

    def _moshi_page(self) -> bytes:
        from rig.dialects.ogg import OggWriter
        from rig.dialects.opus import OpusEncoder

        if self._ogg is None:
            self._ogg = (OpusEncoder(24_000, 80), OggWriter(77))
            head = self._ogg[1].headers(312, 24_000)
        else:
            head = b""
        enc, writer = self._ogg
        self._granule += 1920 * 2
        if self._packets is None or self.fault != "flood":  # a flood repeats one packet
            self._packets = enc.encode(_tone(1920, 24_000))
        return bytes(head + writer.page(self._packets, self._granule))

    def _event_with(self, number: str) -> bytes | str:
        """An event whose timestamp (or number) field holds the raw JSON text `number`."""
        d = self.dialect
        if d in ("rig", "raw"):
            return '{"type":"speech_started","server_ts_ms":' + number + "}"
        if d == "openai":
            head = '{"type":"input_audio_buffer.speech_started","item_id":"u1","audio_start_ms":'
            return head + number + "}"
        if d == "grok":
            return '{"type":"ping","timestamp":' + number + "}"
        if d == "gemini":
            return '{"usageMetadata":{"totalTokenCount":' + number + "}}"
        if d == "pipecat":
            text = '{"label":"rtvi-ai","type":"bot-llm-text","data":{"ts":' + number + "}}"
            return _message_frame(text)
        # moshi has no JSON: a corrupt Ogg page, invalid UTF-8, an unknown kind
        if number == "NaN":
            return b"\x02\xff\xfe not utf-8"
        if number.startswith("9"):  # a whole page whose CRC is wrong
            header = struct.pack("<4sBBqIIIB", b"OggS", 0, 0, 0, 77, 99, 0xDEAD, 1)
            return b"\x01" + header + bytes([10]) + b"x" * 10
        return b"\x09" + number.encode()

    def _nested(self) -> bytes | str:
        deep = "[" * 100_000 + "]" * 100_000
        if self.dialect == "pipecat":
            return _message_frame(deep)
        if self.dialect == "moshi":  # bytes out of sync with the Ogg capture pattern
            return b"\x01" + b"[" * 1000
        return deep

    def _inf_ts(self) -> bytes | str:
        d = self.dialect
        if d == "rig":
            pcm = np.zeros(320, dtype="<i2").tobytes()
            return struct.pack("<4sId", b"RPCM", self.sent_frames, math.inf) + pcm
        if d == "pipecat":
            pcm = _tone(320, self.rate).astype("<i2").tobytes()
            body = pw.field_bytes(3, pcm) + pw.field_varint(4, self.rate)
            body += pw.field_varint(5, 1) + pw.field_varint(6, 2**64 - 1)
            return pw.field_bytes(F_AUDIO, body, always=True)
        return self._event_with("Infinity")

    def _rate_fault(self) -> bytes | str:
        """Audio at a hostile rate, for dialects that say the rate per message."""
        rate = RATE_FAULTS[self.fault]
        pcm = _tone(320, 16_000)
        if self.dialect == "pipecat":
            body = pw.field_bytes(3, pcm.astype("<i2").tobytes()) + pw.field_varint(5, 1)
            if rate is not True:  # protobuf has no booleans: `true` is the varint 1
                body += pw.field_varint(4, int(rate))
            else:
                body += pw.field_varint(4, 1)
            return pw.field_bytes(F_AUDIO, body, always=True)
        if self.dialect == "gemini":
            mime = f"audio/pcm;rate={'true' if rate is True else rate}"
            part = {"inlineData": {"mimeType": mime, "data": _b64(pcm)}}
            return json.dumps({"serverContent": {"modelTurn": {"parts": [part]}}})
        return self._audio()  # moshi: no rate on the wire

    def _error(self) -> bytes | str | None:
        d = self.dialect
        if d in ("rig", "raw"):
            return json.dumps({"type": "error", "message": MARKUP})
        if d in ("openai", "grok"):
            return json.dumps({"type": "error", "error": {"type": "server", "message": MARKUP}})
        if d == "pipecat":
            obj = {"label": "rtvi-ai", "type": "error", "data": {"message": MARKUP, "fatal": True}}
            return _message_frame(json.dumps(obj))
        if d == "moshi":
            return b"\x05" + MARKUP.encode()
        return None  # gemini: errors are close reasons

    # --- the conversation ----------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        f = self.fault
        await self._handshake(ws)
        if f in HANDSHAKE_FAULTS.get(self.dialect, ()):
            await _drain(ws)
            return
        if f == "stop_reading":
            ws.transport.pause_reading()  # never reads again: the client's TCP window fills
            await self._closing.wait()
            return
        reader = asyncio.create_task(_drain(ws))
        try:
            await asyncio.sleep(0.1)
            for k in range(self.good_frames):
                await ws.send(self._audio(float(k * 20)))
                await asyncio.sleep(0.02)
            await self._fault(ws)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), 5)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _fault(self, ws: ServerConnection) -> None:
        f = self.fault
        if f == "nested":
            await ws.send(self._nested())
        elif f == "inf_ts":
            await ws.send(self._inf_ts())
        elif f in NUMBER:
            await ws.send(self._event_with(NUMBER[f]))
        elif f in RATE_FAULTS:
            await ws.send(self._rate_fault())
        elif f == "markup":
            msg = self._error()
            if msg is None:
                await ws.close(1011, MARKUP)
            else:
                await ws.send(msg)
        elif f == "hangup":
            ws.transport.abort()
        elif f == "flood":
            for _ in range(1000):
                await ws.send(self._audio(None))


def _message_frame(text: str) -> bytes:
    return pw.field_bytes(F_MESSAGE, pw.field_str(1, text), always=True)


def _b64(pcm: np.ndarray) -> str:
    import base64

    return base64.b64encode(pcm.astype("<i2").tobytes()).decode()


async def _drain(ws: ServerConnection) -> None:
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass
