"""A stand-in for a pipecat bot behind its WebSocket transport + ProtobufFrameSerializer:
answers RTVI `client-ready` with `bot-ready`, runs an energy VAD over the audio frames it
receives, and after `stop_secs` of quiet sends a transcription frame, a text frame and
`reply_s` of 16 kHz audio frames. Faults: fault=disconnect|malformed, at_s=SECONDS."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.server import ServerConnection, serve

from rig.dialects import protowire as pw
from rig.dialects.pipecat import audio_frame, message_frame, parse_frame, text_frame
from tests.fakes._common import EnergyVad, faults, tone

RATE = 16_000


@dataclass
class PipecatLog:
    messages: list[dict[str, Any]] = field(default_factory=list)
    audio_frames: int = 0
    rates: set[int] = field(default_factory=set)
    #: ground truth on the shared monotonic clock: each audio frame's arrival (in order),
    #: and when each reply's first audio frame was handed to the socket
    audio_rx_ns: list[int] = field(default_factory=list)
    reply_audio_ns: list[int] = field(default_factory=list)


class FakePipecatServer:
    def __init__(self, *, stop_secs: float = 0.3, reply_s: float = 0.6) -> None:
        self.stop_secs = stop_secs
        self.reply_s = reply_s
        self.conns: list[PipecatLog] = []
        self.url = ""

    async def __aenter__(self) -> FakePipecatServer:
        self._server = await serve(self._handler, "127.0.0.1", 0, max_size=None)
        self.url = f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handler(self, ws: ServerConnection) -> None:
        log = PipecatLog()
        self.conns.append(log)
        fault = faults(ws.request.path if ws.request else "")
        vad = EnergyVad(RATE, silence_ms=self.stop_secs * 1000)
        tasks: list[asyncio.Task[None]] = []

        async def reply() -> None:
            transcript = pw.field_bytes(3, pw.field_str(3, "what time is it"), always=True)
            await ws.send(transcript)
            await ws.send(text_frame("It is noon."))
            audio = tone(self.reply_s, RATE, 520.0)
            for i in range(0, audio.size, RATE // 50):  # 20 ms frames, 2x real time
                if i == 0:
                    log.reply_audio_ns.append(time.monotonic_ns())
                await ws.send(audio_frame(audio[i : i + RATE // 50], RATE))
                await asyncio.sleep(0.01)

        async def inject() -> None:
            await asyncio.sleep(float(fault.get("at_s", "0.5")))
            if fault["fault"] == "disconnect":
                ws.transport.abort()
            else:
                await ws.send(b"\x12\x40\x1a")  # Frame.audio claiming 64 bytes, holding 1

        if "fault" in fault:
            tasks.append(asyncio.create_task(inject()))
        try:
            async for raw in ws:
                assert isinstance(raw, bytes)
                number, f = parse_frame(raw)
                if number == 4:
                    msg = json.loads(pw.last_str(f, 1))
                    log.messages.append(msg)
                    if msg.get("type") == "client-ready":
                        await ws.send(
                            message_frame(
                                {
                                    "label": "rtvi-ai",
                                    "type": "bot-ready",
                                    "data": {"version": "1.0.0"},
                                }
                            )
                        )
                elif number == 2:
                    log.audio_rx_ns.append(time.monotonic_ns())
                    log.audio_frames += 1
                    log.rates.add(pw.last_int(f, 4))
                    pcm = np.frombuffer(pw.last_bytes(f, 3), "<i2")
                    if any(e.kind == "stop" for e in vad.feed(pcm)):
                        tasks.append(asyncio.create_task(reply()))
        except Exception:  # noqa: BLE001 - a broken client connection ends this handler
            pass
        finally:
            for t in tasks:
                t.cancel()
