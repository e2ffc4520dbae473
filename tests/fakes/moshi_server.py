"""A Moshi stand-in speaking its WebSocket protocol: after `handshake_delay_s` it sends the
0x00 handshake; for every 0x01 audio message (Ogg pages of Opus, 24 kHz) it answers exactly
one 80 ms frame: the user's audio from `delay_frames` frames earlier (a parrot, so replies
are checkable), as 0x01 Ogg/Opus, plus one 0x02 text token. It logs whether any audio came
before the handshake. Opus via PyAV; Ogg parsing/writing via rig.dialects.ogg (checked
against PyAV's own Ogg demuxer in the tests)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np
from websockets.asyncio.server import ServerConnection, serve

from rig.dialects.ogg import OggReader, OggWriter
from rig.dialects.opus import OpusDecoder, OpusEncoder

RATE, FRAME = 24_000, 1920


@dataclass
class MoshiLog:
    audio_before_handshake: int = 0
    frames_in: int = 0
    frames_out: int = 0
    handshake_ns: int | None = None
    first_audio_ns: int | None = None
    pcm_in: list[np.ndarray] = field(default_factory=list)


class FakeMoshiServer:
    def __init__(self, *, handshake_delay_s: float = 0.3, delay_frames: int = 3) -> None:
        self.handshake_delay_s = handshake_delay_s
        self.delay_frames = delay_frames
        self.conns: list[MoshiLog] = []
        self.url = ""

    async def __aenter__(self) -> FakeMoshiServer:
        self._server = await serve(self._handler, "127.0.0.1", 0, max_size=None)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/api/chat"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handler(self, ws: ServerConnection) -> None:
        log = MoshiLog()
        self.conns.append(log)
        reader, dec = OggReader(), OpusDecoder(RATE)
        enc, writer = OpusEncoder(RATE, 80), OggWriter(4242)
        history = [np.zeros(FRAME, np.int16)] * self.delay_frames
        pending = np.zeros(0, np.int16)
        granule = 0
        ready = False

        async def handshake() -> None:
            nonlocal ready
            await asyncio.sleep(self.handshake_delay_s)
            log.handshake_ns = time.monotonic_ns()
            ready = True
            await ws.send(b"\x00")

        hs = asyncio.create_task(handshake())
        first_out = True
        try:
            async for msg in ws:
                assert isinstance(msg, bytes) and msg[:1] == b"\x01", msg[:8]
                if not ready:
                    log.audio_before_handshake += 1
                    continue
                if log.first_audio_ns is None:
                    log.first_audio_ns = time.monotonic_ns()
                for packet, _ in reader.feed(msg[1:]):
                    if packet.startswith((b"OpusHead", b"OpusTags")):
                        continue
                    pending = np.concatenate([pending, dec.decode(packet)])
                    log.frames_in += 1
                    history.append(np.zeros(FRAME, np.int16))
                    # one frame out per frame in: the user's audio, delay_frames late
                    n = min(FRAME, pending.size)
                    history[-1][:n] = pending[:n]
                    pending = pending[n:]
                    out = history.pop(0)
                    granule += FRAME * 2
                    page = writer.headers(312, RATE) if first_out else b""
                    first_out = False
                    page += writer.page(enc.encode(out), granule)
                    await ws.send(b"\x01" + page)
                    await ws.send(b"\x02" + f" tok{log.frames_out}".encode())
                    log.frames_out += 1
        except Exception:  # noqa: BLE001 - a broken client connection ends this handler
            pass
        finally:
            hs.cancel()
