"""Hostile WebSocket servers for the reliability tests (issue #15), reusable test support.

`HostileServer(fault)` speaks enough of a dialect to get a session running (the handshake,
then some good audio), and then does one bad thing:

  nested        a text message nested 100,000 deep
  huge_int      a text message with a 5000-digit integer
  inf_ts        an audio frame whose timestamp is +inf (rig binary header)
  nan_event     an event whose server_ts_ms is NaN (JSON `NaN`)
  big_ts        an event whose server_ts_ms is 1e300
  rate_huge     `ready` with sample_rate 4e9 (int)
  rate_zero     `ready` with sample_rate 0
  rate_bool     `ready` with sample_rate true
  markup        an error message `[/]` (rich markup)
  hangup        the TCP connection dropped mid-stream, no close frame
  flood         1,000 audio frames at once, as fast as the socket takes them
  stop_reading  stops reading after `ready` (the client's sends must time out: row 2, a
                second pass; listed so the matrix can use it)

Only the rig dialect is spoken today; `dialect` is the extension point for the hostile-server
matrix over every dialect and transport. Binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import struct
from typing import Any

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve

from rig.protocol import rawpcm

FAULTS = (
    "nested",
    "huge_int",
    "inf_ts",
    "nan_event",
    "big_ts",
    "rate_huge",
    "rate_zero",
    "rate_bool",
    "markup",
    "hangup",
    "flood",
    "stop_reading",
)
#: faults the handshake itself carries (no audio before them)
HANDSHAKE_FAULTS = ("rate_huge", "rate_zero", "rate_bool")


class HostileServer:
    """`async with HostileServer("inf_ts") as srv: ... srv.url ...`"""

    def __init__(
        self, fault: str, *, dialect: str = "rig", good_frames: int = 10, rate: int = 16_000
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        if dialect != "rig":
            raise NotImplementedError("hostile servers speak the rig dialect for now")
        self.fault = fault
        self.good_frames = good_frames
        self.rate = rate
        self.url = ""
        self.sent_frames = 0
        self._server: Server | None = None

    async def __aenter__(self) -> HostileServer:
        self._server = await serve(self._handle, "127.0.0.1", 0, max_size=None)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _frame(self, ts_ms: float | None = 0.0) -> bytes:
        pcm = (np.sin(np.arange(320) * 0.2) * 8000).astype(np.int16)
        self.sent_frames += 1
        return rawpcm.encode_audio(pcm, self.sent_frames - 1, ts_ms)

    async def _handle(self, ws: ServerConnection) -> None:
        await ws.recv()  # hello
        ready: dict[str, Any] = {"type": "ready", "version": 1, "sample_rate": self.rate}
        f = self.fault
        if f in HANDSHAKE_FAULTS:
            ready["sample_rate"] = {"rate_huge": 4_000_000_000, "rate_zero": 0}.get(f, True)
            await ws.send(json.dumps(ready))
            await _drain(ws)
            return
        await ws.send(json.dumps(ready))
        if f == "stop_reading":
            await asyncio.sleep(3600)  # never reads again: the client's TCP window fills
            return
        reader = asyncio.create_task(_drain(ws))
        try:
            await asyncio.sleep(0.2)
            for k in range(self.good_frames):
                await ws.send(self._frame(float(k * 20)))
                await asyncio.sleep(0.02)
            await self._fault(ws)
            await asyncio.sleep(5)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _fault(self, ws: ServerConnection) -> None:
        f = self.fault
        if f == "nested":
            await ws.send("[" * 100_000 + "]" * 100_000)
        elif f == "huge_int":
            await ws.send('{"type":"speech_started","server_ts_ms":' + "9" * 5000 + "}")
        elif f == "inf_ts":
            pcm = np.zeros(320, dtype="<i2").tobytes()
            await ws.send(struct.pack("<4sId", b"RPCM", self.sent_frames, math.inf) + pcm)
        elif f == "nan_event":
            await ws.send('{"type":"speech_started","server_ts_ms":NaN}')
        elif f == "big_ts":
            await ws.send('{"type":"speech_started","server_ts_ms":1e300}')
        elif f == "markup":
            await ws.send(json.dumps({"type": "error", "message": "[/] and [bold]x"}))
        elif f == "hangup":
            ws.transport.abort()
        elif f == "flood":
            for _ in range(1000):
                await ws.send(self._frame(None))


async def _drain(ws: ServerConnection) -> None:
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass
