"""Pipecat bots over WebSocket with its protobuf frame serializer, client side, sans-I/O.

pipecat's `frames.proto`: `Frame { oneof frame { TextFrame text = 1; AudioRawFrame audio = 2;
TranscriptionFrame transcription = 3; MessageFrame message = 4; InterruptionFrame
interruption = 5; } }` with `AudioRawFrame { id = 1; name = 2; bytes audio = 3; uint32
sample_rate = 4; uint32 num_channels = 5; optional uint64 pts = 6 }` and `MessageFrame {
string data = 1 }` (JSON: RTVI messages travel in it). Encoded by hand (rig.dialects.protowire).

How this works:
  open      an RTVI `client-ready` message frame (rtvi=True); with wait_bot_ready=True the
            dialect is ready only once the bot answers `bot-ready`, else at once
  uplink    each frame is one `Frame.audio` (PCM16 mono at the session rate)
  downlink  `Frame.audio` -> DownAudio at the frame's own sample_rate (pts, pipeline
            nanoseconds, becomes server_ts_ms when the bot sets it); text, transcription,
            interruption and messages (RTVI events by their `type`) -> DownEvents
  client    (the recording proxy, `decode_client`) the same frames from the client's side:
            `Frame.audio` -> UpAudio, RTVI messages -> `rtvi.<type>`, text -> text
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.core.events import DownAudio, DownEvent, Incoming, Outgoing, UpAudio, UpEvent
from rig.core.units import NS_PER_MS
from rig.dialects import protowire as pw
from rig.dialects.base import Dialect, Message
from rig.errors import ProtocolError
from rig.limits import MAX_CHANNELS, remote_rate
from rig.safejson import loads_remote
from rig.version import __version__

F_TEXT, F_AUDIO, F_TRANSCRIPTION, F_MESSAGE, F_INTERRUPTION = 1, 2, 3, 4, 5
RTVI_LABEL = "rtvi-ai"
RTVI_VERSION = "1.0.0"


def audio_frame(pcm: Pcm16, sample_rate: int, num_channels: int = 1) -> bytes:
    body = (
        pw.field_bytes(3, pcm.astype("<i2", copy=False).tobytes())
        + pw.field_varint(4, sample_rate)
        + pw.field_varint(5, num_channels)
    )
    return pw.field_bytes(F_AUDIO, body, always=True)


def message_frame(obj: dict[str, Any]) -> bytes:
    return pw.field_bytes(F_MESSAGE, pw.field_str(1, json.dumps(obj)), always=True)


def text_frame(text: str) -> bytes:
    return pw.field_bytes(F_TEXT, pw.field_str(3, text), always=True)


def parse_frame(data: bytes) -> tuple[int, dict[int, list[int | bytes]]]:
    """(which oneof field, its parsed body). A Frame with none set is garbage."""
    outer = pw.parse(data)
    which = [n for n in outer if n in (F_TEXT, F_AUDIO, F_TRANSCRIPTION, F_MESSAGE, F_INTERRUPTION)]
    if not which:
        raise ProtocolError(f"pipecat: Frame with no known oneof field ({sorted(outer)})")
    number = which[-1]
    body = outer[number][-1]
    if not isinstance(body, bytes):
        raise ProtocolError(f"pipecat: Frame field {number} is not a message")
    return number, pw.parse(body)


def _audio(f: dict[int, list[int | bytes]]) -> tuple[Pcm16, int]:
    """The mono PCM (first channel) and rate of a parsed AudioRawFrame."""
    raw = pw.last_bytes(f, 3)
    rate = remote_rate(pw.last_int(f, 4), "pipecat audio frame")
    channels = pw.last_int(f, 5, 1) or 1
    if channels > MAX_CHANNELS:
        raise ProtocolError(f"pipecat: audio frame with {channels} channels")
    if len(raw) % (2 * channels):
        raise ProtocolError(f"pipecat: bad audio frame ({channels} ch, {len(raw)} bytes)")
    pcm = np.frombuffer(raw, dtype="<i2").astype(np.int16)
    if channels > 1:
        pcm = pcm.reshape(-1, channels)[:, 0].copy()
    return pcm, rate


class PipecatDialect(Dialect):
    name = "pipecat"
    default_url = "ws://127.0.0.1:8765"

    def __init__(
        self, *, sample_rate: int = 16_000, rtvi: bool = True, wait_bot_ready: bool = False
    ) -> None:
        self.uplink_rate = sample_rate
        self.downlink_rate = sample_rate  # until the bot's first audio frame says otherwise
        self.rtvi = rtvi
        self.wait_bot_ready = wait_bot_ready and rtvi
        self._ready = not self.wait_bot_ready
        self._msg_id = 0

    def headers(self) -> dict[str, str]:
        return {}

    def _rtvi(self, kind: str, data: dict[str, Any]) -> bytes:
        self._msg_id += 1
        return message_frame(
            {"label": RTVI_LABEL, "type": kind, "id": f"rig-{self._msg_id}", "data": data}
        )

    def open_messages(self) -> list[Message]:
        if not self.rtvi:
            return []
        about = {"library": "rig", "library_version": __version__}
        return [self._rtvi("client-ready", {"version": RTVI_VERSION, "about": about})]

    @property
    def ready(self) -> bool:
        return self._ready

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        return [audio_frame(pcm, self.uplink_rate)]

    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        return []  # pipecat bots interrupt themselves on their own VAD

    def decode_client(self, message: Message, t_ns: int) -> list[Outgoing]:
        if isinstance(message, str):
            raise ProtocolError("pipecat: text message from the client on a protobuf socket")
        number, f = parse_frame(message)
        if number == F_AUDIO:
            pcm, rate = _audio(f)
            self.uplink_rate = rate
            return [UpAudio(pcm, rate, t_ns, None)]
        if number == F_MESSAGE:
            obj = loads_remote(pw.last_str(f, 1), "pipecat message frame")
            if isinstance(obj, dict) and obj.get("label") == RTVI_LABEL:
                return [UpEvent(f"rtvi.{str(obj.get('type'))[:80]}", t_ns, {})]
            return [UpEvent("message", t_ns, {})]
        names = {F_TEXT: "text", F_TRANSCRIPTION: "transcription"}
        return [UpEvent(names.get(number, "interruption"), t_ns, {})]

    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        if isinstance(message, str):
            raise ProtocolError(
                "pipecat: text message on a protobuf-serialized socket", message[:200]
            )
        number, f = parse_frame(message)
        if number == F_AUDIO:
            pcm, rate = _audio(f)
            self.downlink_rate = rate
            pts = f.get(6)
            ts = pw.last_int(f, 6) / NS_PER_MS if pts else None
            return [DownAudio(pcm, rate, t_ns, ts, None)]
        if number == F_TEXT:
            return [DownEvent("text", t_ns, {"text": pw.last_str(f, 3)})]
        if number == F_TRANSCRIPTION:
            data = {
                "text": pw.last_str(f, 3),
                "user_id": pw.last_str(f, 4),
                "timestamp": pw.last_str(f, 5),
            }
            return [DownEvent("transcription", t_ns, data)]
        if number == F_INTERRUPTION:
            return [DownEvent("interruption", t_ns, {})]
        obj = loads_remote(pw.last_str(f, 1), "pipecat message frame")
        if not isinstance(obj, dict):
            return [DownEvent("message", t_ns, {"data": obj})]
        if obj.get("label") == RTVI_LABEL:
            kind = str(obj.get("type"))
            if kind == "bot-ready":
                self._ready = True
            if kind == "error":
                raise ProtocolError(f"pipecat bot error: {obj.get('data')}", obj)
            return [DownEvent(f"rtvi.{kind}", t_ns, {"data": obj.get("data")})]
        return [DownEvent("message", t_ns, {"data": obj})]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "serializer": "pipecat frames.proto (protobuf)",
            "sample_rate": self.uplink_rate,
            "rtvi": self.rtvi,
            "wait_bot_ready": self.wait_bot_ready,
        }


def create(**options: Any) -> PipecatDialect:
    return PipecatDialect(**options)
