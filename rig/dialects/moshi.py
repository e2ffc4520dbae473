"""Moshi (Kyutai) full-duplex WebSocket protocol, client side, sans-I/O.

Every message is binary: one kind byte, then a payload.
  0x00 handshake  the server sends it when the model is ready; until then the dialect is not
                  `ready` and the transport sends no uplink at all (the gate)
  0x01 audio      Ogg pages holding Opus at 24 kHz mono, both ways; the first uplink message
                  also carries the OpusHead / OpusTags header pages
  0x02 text       UTF-8 text tokens from the model -> DownEvent("text") with the token
  0x03 control, 0x04 metadata, 0x06 ping -> DownEvents; 0x05 error -> ProtocolError
Client side (the recording proxy, `decode_client`): 0x01 Ogg/Opus pages from the client are
decoded by a decoder of their own (UpAudio at 24 kHz); 0x02 text and the event kinds keep
their names (their payloads are not kept).
Each uplink frame becomes one Opus packet in one Ogg page, so session frames must be 20, 40,
60 or 80 ms; Moshi's own frame is 80 ms (1920 samples), the session frame the CLI picks for
this dialect (`frame_ms` below). The session keeps sending
silence through pauses and the drain, as a live microphone would: Moshi is full-duplex and
needs a continuous input stream to keep generating.
"""

from __future__ import annotations

import zlib
from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import DownAudio, DownEvent, Incoming, Outgoing, UpAudio, UpEvent
from rig.dialects.base import Dialect, Message
from rig.dialects.ogg import OggReader, OggWriter
from rig.dialects.opus import OpusDecoder, OpusEncoder
from rig.errors import ConfigError, ProtocolError

RATE = 24_000
FRAME_MS = 80
PRE_SKIP = 312  # libopus encoder lookahead at 48 kHz (RFC 7845 units)

KIND_HANDSHAKE = 0x00
KIND_AUDIO = 0x01
KIND_TEXT = 0x02
_EVENT_KINDS = {0x03: "control", 0x04: "metadata", 0x06: "ping"}


class MoshiDialect(Dialect):
    name = "moshi"
    default_url = "ws://127.0.0.1:8998/api/chat"
    frame_ms = FRAME_MS  # preferred session frame
    steps_in_real_time = True  # one model step per 80 ms frame, as the audio plays

    def __init__(self, *, bitrate: int = 32_000, serial: int = 0) -> None:
        self.uplink_rate = RATE
        self.downlink_rate = RATE
        self.opus_frame_ms: int | None = None  # set by the first uplink frame
        self.bitrate = bitrate
        self._encoder: OpusEncoder | None = None
        self._decoder = OpusDecoder(RATE)
        self._writer = OggWriter(serial or zlib.crc32(b"rig-moshi"))
        self._reader = OggReader()
        self._granule = 0
        self._headers_sent = False
        self._ready = False
        self._down_packets = 0
        self._client_reader = OggReader()
        self._client_decoder: OpusDecoder | None = None  # made with the client's first audio

    def headers(self) -> dict[str, str]:
        return {}

    def open_messages(self) -> list[Message]:
        return []  # the server speaks first (0x00)

    @property
    def ready(self) -> bool:
        return self._ready

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        if not self._ready:
            raise ProtocolError("moshi: uplink audio before the 0x00 handshake")
        if self._encoder is None:
            frame_ms = pcm.size * 1000 // RATE
            if frame_ms not in (20, 40, 60, 80) or frame_ms * RATE != pcm.size * 1000:
                raise ConfigError(
                    f"moshi: uplink frames must be 20, 40, 60 or 80 ms (80 is Moshi's own), "
                    f"got {pcm.size} samples at {RATE} Hz"
                )
            self.opus_frame_ms = frame_ms
            self._encoder = OpusEncoder(RATE, frame_ms, self.bitrate)
        packets = self._encoder.encode(pcm)
        self._granule += pcm.size * 2  # Ogg Opus granules count 48 kHz samples
        page = b""
        if not self._headers_sent:
            page = self._writer.headers(PRE_SKIP, RATE)
            self._headers_sent = True
        page += self._writer.page(packets, self._granule)
        return [bytes([KIND_AUDIO]) + page]

    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        return []  # Moshi has no control requests the rig uses; barge-in is just audio

    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        if isinstance(message, str) or not message:
            raise ProtocolError("moshi: expected a binary message with a kind byte")
        kind, payload = message[0], message[1:]
        if kind == KIND_HANDSHAKE:
            self._ready = True
            return [DownEvent("handshake", t_ns, {"payload": payload.hex()})]
        if kind == KIND_AUDIO:
            out: list[Incoming] = []
            for packet, granule in self._reader.feed(payload):
                if packet.startswith((b"OpusHead", b"OpusTags")):
                    continue
                pcm = self._decoder.decode(packet)
                self._down_packets += 1
                if pcm.size:
                    extra = {"granule": granule, "packet": self._down_packets}
                    out.append(DownAudio(pcm, RATE, t_ns, None, extra))
            return out
        if kind == KIND_TEXT:
            try:
                text = payload.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProtocolError(f"moshi: text token is not UTF-8: {exc}") from exc
            return [DownEvent("text", t_ns, {"text": text})]
        if kind == 0x05:
            raise ProtocolError(
                f"moshi server error: {payload.decode('utf-8', 'replace')}", payload[:200]
            )
        if kind in _EVENT_KINDS:
            return [DownEvent(_EVENT_KINDS[kind], t_ns, {"payload": payload[:200].hex()})]
        raise ProtocolError(f"moshi: unknown message kind 0x{kind:02x}", message[:32])

    def decode_client(self, message: Message, t_ns: int) -> list[Outgoing]:
        if isinstance(message, str) or not message:
            raise ProtocolError("moshi: client sent something other than a kind byte + payload")
        kind, payload = message[0], message[1:]
        if kind == KIND_AUDIO:
            if self._client_decoder is None:
                self._client_decoder = OpusDecoder(RATE)
            out: list[Outgoing] = []
            for packet, granule in self._client_reader.feed(payload):
                if packet.startswith((b"OpusHead", b"OpusTags")):
                    continue
                pcm = self._client_decoder.decode(packet)
                if pcm.size:
                    out.append(UpAudio(pcm, RATE, t_ns, {"granule": granule}))
            return out
        if kind == KIND_TEXT:
            return [UpEvent("text", t_ns, {})]
        if kind in _EVENT_KINDS:
            return [UpEvent(_EVENT_KINDS[kind], t_ns, {})]
        raise ProtocolError(f"moshi: unknown client message kind 0x{kind:02x}", message[:32])

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sample_rate": RATE,
            "codec": "opus/ogg",
            "opus_frame_ms": self.opus_frame_ms,
            "bitrate": self.bitrate,
        }


def create(**options: Any) -> MoshiDialect:
    return MoshiDialect(**options)
