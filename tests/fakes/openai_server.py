"""A protocol-faithful stand-in for the OpenAI Realtime API (GA and beta names) and xAI's
Grok Voice Agent API, written from their documented event shapes.

What it does per connection: `session.created` (Grok: `conversation.created`), then
`session.updated` in answer to `session.update` (with the format checked: PCM 24 kHz);
`input_audio_buffer.append` audio feeds an energy VAD when turn detection is on, giving
`speech_started` / `speech_stopped` with `audio_start_ms` / `audio_end_ms` positions in the
received audio, then `committed`, a user item and a response; with turn detection off
(OpenAI `null`, Grok `{"type": null}`) it waits for `commit` + `response.create`. A response
is `response.created`, an assistant item, audio deltas of a tone (faster than real time, like
the real APIs), `...audio.done` and `response.done`; speech during a response cancels it.
`conversation.item.truncate` is checked (known item, audio_end_ms within what was sent) and
answered `conversation.item.truncated`. `conversation.item.create` text messages are checked
(content part type per role and layout) and answered `conversation.item.added`/`.done` (GA) or
`conversation.item.created` (beta). Grok also sends `ping` with a server timestamp.
Faults per connection from the URL query: fault=disconnect|malformed|error, at_s=SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from tests.fakes._common import EnergyVad, b64, faults, tone, unb64

RATE = 24_000


@dataclass
class ConnLog:
    headers: dict[str, str]
    events: list[dict[str, Any]] = field(default_factory=list)  # client events, audio stripped
    appended_samples: int = 0
    truncates: list[dict[str, Any]] = field(default_factory=list)
    errors_sent: list[str] = field(default_factory=list)
    first_append_before_update: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)  # conversation.item.create items
    first_append_index: int | None = None  # position of the first append among the events


class FakeRealtimeServer:
    def __init__(
        self,
        flavor: str = "openai",
        *,
        reply_s: float = 1.0,
        model_delay_s: float = 0.15,
        chunk_ms: int = 100,
        silence_ms: float = 400.0,
        vad_detect_ms: float = 0.0,
        commit_delay_s: float = 0.0,
        ping_interval_s: float = 0.2,
        server_clock_offset_ms: float = 5_000_000.0,
    ) -> None:
        self.flavor = flavor
        self.reply_s = reply_s
        self.model_delay_s = model_delay_s
        self.chunk_ms = chunk_ms
        self.silence_ms = silence_ms
        self.vad_detect_ms = vad_detect_ms
        self.commit_delay_s = commit_delay_s
        self.ping_interval_s = ping_interval_s
        self.server_clock_offset_ms = server_clock_offset_ms
        self.conns: list[ConnLog] = []
        self._ids = itertools.count(1)
        self.url = ""

    async def __aenter__(self) -> FakeRealtimeServer:
        self._server = await serve(self._handler, "127.0.0.1", 0, max_size=None)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/realtime"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"

    async def _handler(self, ws: ServerConnection) -> None:
        log = ConnLog(dict(ws.request.headers) if ws.request else {})
        self.conns.append(log)
        conn = _Conn(self, ws, log, faults(ws.request.path if ws.request else ""))
        await conn.run()


class _Conn:
    def __init__(
        self, srv: FakeRealtimeServer, ws: ServerConnection, log: ConnLog, fault: dict[str, str]
    ) -> None:
        self.srv = srv
        self.ws = ws
        self.log = log
        self.fault = fault
        self.grok = srv.flavor == "grok"
        self.beta = srv.flavor == "openai-beta"
        self.turn_detection: str | None = "server_vad"
        self.configured = False
        self.vad = EnergyVad(RATE, silence_ms=srv.silence_ms, detect_ms=srv.vad_detect_ms)
        self.uncommitted = 0
        self.committing = False
        self.response: asyncio.Task[None] | None = None
        self.items: dict[str, int] = {}  # assistant item -> samples sent
        self.user_item: str | None = None
        self._bg: set[asyncio.Task[None]] = set()

    async def send(self, obj: dict[str, Any]) -> None:
        obj.setdefault("event_id", self.srv._id("event"))
        await self.ws.send(json.dumps(obj))

    async def error(self, message: str, code: str = "invalid_request_error") -> None:
        self.log.errors_sent.append(message)
        await self.send(
            {"type": "error", "error": {"type": code, "code": code, "message": message}}
        )

    async def run(self) -> None:
        tasks = []
        if self.grok:
            await self.send(
                {"type": "conversation.created", "conversation": {"id": self.srv._id("conv")}}
            )
            tasks.append(asyncio.create_task(self.pings()))
        else:
            await self.send(
                {
                    "type": "session.created",
                    "session": {"id": self.srv._id("sess"), "type": "realtime"},
                }
            )
        if "fault" in self.fault:
            tasks.append(asyncio.create_task(self.inject()))
        try:
            async for raw in self.ws:
                await self.on_message(json.loads(raw))
        except Exception:  # noqa: BLE001 - a broken client connection ends this handler
            pass
        finally:
            for t in tasks + ([self.response] if self.response else []):
                t.cancel()

    async def inject(self) -> None:
        await asyncio.sleep(float(self.fault.get("at_s", "0.5")))
        kind = self.fault["fault"]
        if kind == "disconnect":
            self.ws.transport.abort()  # no close frame: a dead peer, not a goodbye
        elif kind == "malformed":
            await self.ws.send('{"type": "response.output_audio.delta", "delta": ')
        elif kind == "error":
            await self.error(
                "The server had an error while processing your request.", "server_error"
            )

    async def pings(self) -> None:
        while True:
            ts = time.monotonic_ns() / 1e6 + self.srv.server_clock_offset_ms
            await self.send({"type": "ping", "timestamp": round(ts, 3)})
            await asyncio.sleep(self.srv.ping_interval_s)

    async def on_message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        self.log.events.append({k: v for k, v in msg.items() if k != "audio"})
        if kind == "session.update":
            await self.on_session_update(msg.get("session") or {})
        elif kind == "conversation.item.create":
            await self.on_item_create(msg.get("item"))
        elif kind == "input_audio_buffer.append":
            if not self.configured:
                self.log.first_append_before_update = True
            if self.log.first_append_index is None:
                self.log.first_append_index = len(self.log.events) - 1
            await self.on_append(unb64(msg["audio"]))
        elif kind == "input_audio_buffer.commit":
            self.committing = True
            if self.srv.commit_delay_s > 0:  # completes later; events behind it do not wait
                self._bg.add(asyncio.create_task(self.on_commit()))
            else:  # in order, like OpenAI: commit + response.create back to back is fine
                await self.on_commit()
        elif kind == "response.create":
            if self.committing:
                await self.error("response.create before the input audio buffer was committed")
                return
            self.start_response()
        elif kind == "conversation.item.truncate":
            await self.on_truncate(msg)
        else:
            await self.error(f"Invalid value: '{kind}'")

    async def on_session_update(self, s: dict[str, Any]) -> None:
        if self.beta:
            ok = s.get("input_audio_format") == "pcm16" and s.get("output_audio_format") == "pcm16"
            td = s.get("turn_detection", "absent")
        elif self.grok:
            fmt = ((s.get("audio") or {}).get("input") or {}).get("format") or {}
            ok = fmt == {"type": "audio/pcm", "rate": RATE}
            td = s.get("turn_detection", "absent")
            if isinstance(td, dict) and td.get("type") is None:
                td = None
            elif td is None:
                ok = False  # Grok's VAD-off form is {"type": null}
        else:
            inp = (s.get("audio") or {}).get("input") or {}
            ok = s.get("type") == "realtime" and inp.get("format") == {
                "type": "audio/pcm",
                "rate": RATE,
            }
            td = inp.get("turn_detection", "absent")
        if not ok:
            await self.error(f"session.update rejected: {json.dumps(s)[:200]}")
            return
        if td != "absent":
            self.turn_detection = None if td is None else td.get("type")
            if isinstance(td, dict) and "silence_duration_ms" in td:
                self.vad.silence_ms = td["silence_duration_ms"]
        self.configured = True
        await self.send({"type": "session.updated", "session": s})

    async def on_append(self, pcm: Any) -> None:
        self.log.appended_samples += pcm.size
        self.uncommitted += pcm.size
        if self.turn_detection is None:
            return
        for ev in self.vad.feed(pcm):
            if ev.kind == "start":
                self.user_item = self.srv._id("item")
                await self.send(
                    {
                        "type": "input_audio_buffer.speech_started",
                        "audio_start_ms": round(ev.ms),
                        "item_id": self.user_item,
                    }
                )
                if self.response is not None and not self.response.done():
                    self.response.cancel()  # interrupt_response
            else:
                await self.send(
                    {
                        "type": "input_audio_buffer.speech_stopped",
                        "audio_end_ms": round(ev.ms),
                        "item_id": self.user_item,
                    }
                )
                await self.committed()
                self.start_response()

    async def on_commit(self) -> None:
        if self.uncommitted == 0:
            self.committing = False
            await self.error("Error committing input audio buffer: buffer too small.")
            return
        await asyncio.sleep(self.srv.commit_delay_s)
        self.user_item = self.srv._id("item")
        await self.committed()
        self.committing = False

    async def committed(self) -> None:
        self.uncommitted = 0
        await self.send(
            {
                "type": "input_audio_buffer.committed",
                "previous_item_id": None,
                "item_id": self.user_item,
            }
        )
        added = "conversation.item.created" if self.beta else "conversation.item.added"
        await self.send(
            {"type": added, "item": {"id": self.user_item, "type": "message", "role": "user"}}
        )

    def start_response(self) -> None:
        self.response = asyncio.create_task(self.respond())

    async def respond(self) -> None:
        rid, iid = self.srv._id("resp"), self.srv._id("item")
        delta = "response.audio.delta" if self.beta else "response.output_audio.delta"
        done = "response.audio.done" if self.beta else "response.output_audio.done"
        status = "completed"
        try:
            await self.send(
                {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
            )
            await asyncio.sleep(self.srv.model_delay_s)
            await self.send(
                {
                    "type": "response.output_item.added",
                    "response_id": rid,
                    "output_index": 0,
                    "item": {"id": iid, "type": "message", "role": "assistant"},
                }
            )
            self.items[iid] = 0
            audio = tone(self.srv.reply_s, RATE)
            n = RATE * self.srv.chunk_ms // 1000
            for i in range(0, audio.size, n):
                part = audio[i : i + n]
                await self.send(
                    {
                        "type": delta,
                        "response_id": rid,
                        "item_id": iid,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": b64(part),
                    }
                )
                self.items[iid] += part.size
                await asyncio.sleep(self.srv.chunk_ms / 2000)  # 2x real time
            await self.send(
                {
                    "type": done,
                    "response_id": rid,
                    "item_id": iid,
                    "output_index": 0,
                    "content_index": 0,
                }
            )
        except asyncio.CancelledError:
            status = "cancelled"
        with contextlib.suppress(Exception):
            await self.send({"type": "response.done", "response": {"id": rid, "status": status}})

    async def on_item_create(self, item: Any) -> None:
        """A text message item (the only kind the rig sends): role user/system with
        `input_text`, assistant with `output_text` (GA) or `text` (beta)."""
        part = "text" if self.beta else "output_text"
        allowed = {"user": "input_text", "system": "input_text", "assistant": part}
        if not isinstance(item, dict) or item.get("type") != "message":
            await self.error(f"Invalid item: {item!r}")
            return
        role, content = item.get("role"), item.get("content")
        if (
            role not in allowed
            or not isinstance(content, list)
            or not content
            or any(c.get("type") != allowed[role] or not c.get("text") for c in content)
        ):
            await self.error(f"Invalid content for role {role!r}: {content!r}")
            return
        iid = self.srv._id("item")
        self.log.history.append(item)
        created = {"id": iid, "status": "completed", **item}
        added = "conversation.item.created" if self.beta else "conversation.item.added"
        await self.send({"type": added, "previous_item_id": None, "item": created})
        if not self.beta:
            await self.send({"type": "conversation.item.done", "item": created})

    async def on_truncate(self, msg: dict[str, Any]) -> None:
        iid, end_ms = msg.get("item_id"), msg.get("audio_end_ms")
        if iid not in self.items or not isinstance(end_ms, int):
            await self.error(f"Invalid item_id or audio_end_ms in truncate: {msg}")
            return
        sent_ms = self.items[iid] * 1000 // RATE
        if end_ms > sent_ms:
            await self.error(f"audio_end_ms {end_ms} is past the item's audio ({sent_ms} ms)")
            return
        self.log.truncates.append({"item_id": iid, "audio_end_ms": end_ms, "sent_ms": sent_ms})
        await self.send(
            {
                "type": "conversation.item.truncated",
                "item_id": iid,
                "content_index": msg.get("content_index", 0),
                "audio_end_ms": end_ms,
            }
        )
