"""A protocol-faithful stand-in for the Gemini Live API (BidiGenerateContent), written from
its documented message shapes: `setup` first (answered `setupComplete`, anything before it
is a policy-violation close), `realtimeInput.audio` as base64 PCM16 with mimeType
`audio/pcm;rate=16000`, automatic activity detection (an energy VAD) or, when the setup
disables it, `activityStart` / `activityEnd`; replies as `serverContent.modelTurn.parts[]
.inlineData` (`audio/pcm;rate=24000`), then `generationComplete` and `turnComplete`;
speech during a reply sends `interrupted`; `clientContent` turns (user/model, with parts) are
taken as history (a reply only with turnComplete). Errors close the socket with a code and reason,
as Gemini does. Faults from the URL query: fault=disconnect|malformed, at_s=SECONDS.
Client JSON is read as Google's protobuf parser reads it: each field by its camelCase JSON
name or its snake_case proto name (the google-genai client sends `realtime_input`,
`mime_type`), bytes in standard or URL-safe base64. With `voice_activity=True` its VAD
also sends `voiceActivity` messages (`{"type": "ACTIVITY_START"|"ACTIVITY_END",
"audioOffset": "1.250s"}`, the wire shape google-genai's LiveServerMessage.voice_activity
reads), as the service does where it reports voice activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.server import ServerConnection, serve

from tests.fakes._common import EnergyVad, b64, faults, pget, tone, unb64_proto

IN_RATE, OUT_RATE = 16_000, 24_000


@dataclass
class GeminiLog:
    headers: dict[str, str]
    setup: dict[str, Any] | None = None
    audio: list[np.ndarray] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    close_reason: str | None = None
    client_content: list[dict[str, Any]] = field(default_factory=list)
    audio_before_content: bool = False  # did audio arrive before the history?


class FakeGeminiServer:
    def __init__(
        self,
        *,
        reply_s: float = 0.8,
        model_delay_s: float = 0.15,
        silence_ms: float = 400.0,
        voice_activity: bool = False,
    ) -> None:
        self.voice_activity = voice_activity
        self.reply_s = reply_s
        self.model_delay_s = model_delay_s
        self.silence_ms = silence_ms
        self.conns: list[GeminiLog] = []
        self.url = ""

    async def __aenter__(self) -> FakeGeminiServer:
        self._server = await serve(self._handler, "127.0.0.1", 0, max_size=None)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/ws/BidiGenerateContent"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handler(self, ws: ServerConnection) -> None:
        log = GeminiLog(dict(ws.request.headers) if ws.request else {})
        self.conns.append(log)
        fault = faults(ws.request.path if ws.request else "")
        vad = EnergyVad(IN_RATE, silence_ms=self.silence_ms)
        reply: asyncio.Task[None] | None = None
        tasks = []

        async def close(code: int, reason: str) -> None:
            log.close_reason = reason
            await ws.close(code, reason)

        async def respond() -> None:
            await asyncio.sleep(self.model_delay_s)
            audio = tone(self.reply_s, OUT_RATE, 520.0)
            n = OUT_RATE // 10
            for i in range(0, audio.size, n):
                part = {
                    "inlineData": {
                        "mimeType": f"audio/pcm;rate={OUT_RATE}",
                        "data": b64(audio[i : i + n]),
                    }
                }
                # Gemini sends its JSON in binary frames
                await ws.send(
                    json.dumps({"serverContent": {"modelTurn": {"parts": [part]}}}).encode()
                )
                await asyncio.sleep(0.05)
            await ws.send(json.dumps({"serverContent": {"generationComplete": True}}))
            await ws.send(json.dumps({"serverContent": {"turnComplete": True}}))

        async def inject() -> None:
            await asyncio.sleep(float(fault.get("at_s", "0.5")))
            if fault["fault"] == "disconnect":
                ws.transport.abort()
            else:
                await ws.send('{"serverContent": {"modelTurn": ')

        if "fault" in fault:
            tasks.append(asyncio.create_task(inject()))
        try:
            async for raw in ws:
                msg = json.loads(raw)
                if log.setup is None:
                    if "setup" not in msg:
                        await close(1008, "first message must be setup")
                        return
                    log.setup = msg["setup"]
                    await ws.send(json.dumps({"setupComplete": {}}))
                    continue
                cc = pget(msg, "clientContent")
                if cc is not None:
                    turns = pget(cc, "turns")
                    if not isinstance(turns, list) or any(
                        pget(t, "role") not in ("user", "model") or not pget(t, "parts")
                        for t in turns
                    ):
                        await close(1007, f"invalid clientContent: {cc!r}"[:120])
                        return
                    log.audio_before_content = bool(log.audio)
                    log.client_content.append(cc)
                    if pget(cc, "turnComplete"):
                        reply = asyncio.create_task(respond())
                    continue
                rt = pget(msg, "realtimeInput") or {}
                aad = pget(pget(log.setup, "realtimeInputConfig"), "automaticActivityDetection")
                manual = bool(pget(aad, "disabled"))
                audio = pget(rt, "audio")
                if isinstance(audio, dict):
                    mime = pget(audio, "mimeType")
                    if mime != f"audio/pcm;rate={IN_RATE}":
                        await close(1007, f"unsupported mimeType {mime}")
                        return
                    try:
                        pcm = unb64_proto(str(pget(audio, "data")))
                    except ValueError:
                        await close(1007, "invalid base64 in audio.data")
                        return
                    log.audio.append(pcm)
                    if not manual:
                        for ev in vad.feed(pcm):
                            if self.voice_activity:
                                kind = "ACTIVITY_START" if ev.kind == "start" else "ACTIVITY_END"
                                va = {"type": kind, "audioOffset": f"{ev.ms / 1000:.3f}s"}
                                await ws.send(json.dumps({"voiceActivity": va}))
                            if ev.kind == "start" and reply is not None and not reply.done():
                                reply.cancel()
                                await ws.send(json.dumps({"serverContent": {"interrupted": True}}))
                            if ev.kind == "stop":
                                reply = asyncio.create_task(respond())
                for key in ("activityStart", "activityEnd", "audioStreamEnd"):
                    if pget(rt, key) is not None:
                        log.markers.append(key)
                        if key != "audioStreamEnd" and not manual:
                            await close(1007, f"{key} needs automatic activity detection off")
                            return
                        if key == "activityEnd":
                            reply = asyncio.create_task(respond())
        except Exception:  # noqa: BLE001 - a broken client connection ends this handler
            pass
        finally:
            for t in tasks + ([reply] if reply else []):
                t.cancel()
                with contextlib.suppress(BaseException):
                    await t
