"""Hostile WebRTC signalling servers (issue #15 matrix): the offer/answer HTTP exchange of the
WHIP and pipecat (`/api/offer`, JSON) shapes, doing one bad thing instead of answering.

  nested        the answer is JSON nested 100,000 deep (WHIP: as the SDP text)
  huge_int      pipecat `{"sdp": <5000 digits>}`; WHIP: an SDP line with a 5000-digit number
  nan_event     pipecat `{"sdp": NaN}`; WHIP: `NaN` as the SDP
  markup        HTTP 500 whose body is rich markup `[/] and [bold]x`
  hangup        reads the offer, then drops the TCP connection without a reply
  flood         a 2 MiB answer (signalling replies are capped at 1 MiB)
  stop_reading  accepts the connection and never reads nor answers

Timestamps and rates do not travel in signalling (Opus is 48 kHz on the wire): those faults
are the WebSocket matrix's. Binds 127.0.0.1 on a free port; a plain asyncio HTTP/1.1 server.
"""

from __future__ import annotations

import asyncio
import contextlib

SIGNALLING_FAULTS = ("nested", "huge_int", "nan_event", "markup", "hangup", "flood", "stop_reading")
MARKUP = "[/] and [bold]x"


class HostileSignalling:
    """`async with HostileSignalling("nested", shape="pipecat") as srv: ... srv.url ...`"""

    def __init__(self, fault: str, *, shape: str = "whip") -> None:
        if fault not in SIGNALLING_FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(SIGNALLING_FAULTS)}")
        if shape not in ("whip", "pipecat"):
            raise ValueError(f"unknown signalling shape {shape!r}")
        self.fault = fault
        self.shape = shape
        self.url = ""
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._closing = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> HostileSignalling:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        path = "/api/offer" if self.shape == "pipecat" else "/offer"
        self.url = f"http://127.0.0.1:{port}{path}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        for w in self._writers:
            w.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _body(self) -> tuple[int, bytes]:
        f, pipecat = self.fault, self.shape == "pipecat"
        if f == "nested":
            return 200 if pipecat else 201, ("[" * 100_000 + "]" * 100_000).encode()
        if f == "huge_int":
            if pipecat:
                return 200, b'{"sdp":' + b"9" * 5000 + b',"type":"answer"}'
            return 201, b"v=0\r\no=- " + b"9" * 5000 + b" 1 IN IP4 127.0.0.1\r\ns=-\r\n"
        if f == "nan_event":
            return (200, b'{"sdp":NaN,"type":"answer"}') if pipecat else (201, b"NaN")
        if f == "markup":
            return 500, MARKUP.encode()
        return 200, b'{"sdp":"' + b"x" * (2 << 20) + b'"}'  # flood: over the 1 MiB cap

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        self.requests += 1
        try:
            if self.fault == "stop_reading":
                writer.transport.pause_reading()  # type: ignore[attr-defined]
                await self._closing.wait()
                return
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            await reader.readexactly(length)
            if self.fault == "hangup":
                writer.transport.abort()
                return
            status, body = self._body()
            ctype = "application/json" if self.shape == "pipecat" else "application/sdp"
            head_out = (
                f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head_out.encode() + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()
