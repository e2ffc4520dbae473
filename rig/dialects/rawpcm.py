"""The rig's own protocol as a dialect (client side). See rig.protocol.rawpcm."""

from __future__ import annotations

from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import DownAudio, DownEvent, Incoming
from rig.core.units import NS_PER_MS
from rig.dialects.base import Dialect, Message
from rig.errors import ProtocolError
from rig.limits import remote_rate, remote_ts_ms, remote_ts_ns
from rig.protocol import rawpcm


class RawPcmDialect(Dialect):
    name = "rig"

    def __init__(self, sample_rate: int = 16_000, framing: str = "rig1") -> None:
        if framing not in ("rig1", "raw"):
            raise ValueError(f"unknown framing {framing!r}")
        self.uplink_rate = sample_rate
        self.downlink_rate = sample_rate
        self.framing = framing
        self._ready = False
        self._down_seq = 0

    def headers(self) -> dict[str, str]:
        return {}

    def open_messages(self) -> list[Message]:
        return [rawpcm.hello(self.uplink_rate, self.framing)]

    @property
    def ready(self) -> bool:
        return self._ready

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        return [rawpcm.encode_audio(pcm, seq, t_now_ns / NS_PER_MS, self.framing)]

    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        if kind == "probe":
            return [rawpcm.encode_text("probe", id=data["id"], t0_ns=t_now_ns)]
        if kind == "end":
            return [rawpcm.encode_text("end")]
        return []  # nothing else means anything to a rig-pcm server

    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        if isinstance(message, bytes):
            frame = rawpcm.decode_audio(message, self.framing, self._down_seq)
            self._down_seq += 1
            return [
                DownAudio(
                    frame.pcm, self.downlink_rate, t_ns, frame.ts_ms, {"server_seq": frame.seq}
                )
            ]
        msg = rawpcm.decode_text(message)
        kind = msg.pop("type")
        if kind == "ready":
            self.downlink_rate = remote_rate(msg.get("sample_rate", self.downlink_rate), "ready")
            self._ready = True
        elif kind == "error":
            raise ProtocolError(f"server error: {msg.get('message', msg)}", msg)
        elif kind == "probe_reply":
            for key in ("t0_ns", "t1_server_ns", "t2_server_ns"):
                if key in msg:
                    remote_ts_ns(msg[key], f"probe_reply.{key}")
        ts = msg.get("server_ts_ms")
        if ts is not None:
            ts = remote_ts_ms(ts, f"{kind}.server_ts_ms")
        return [DownEvent(kind, t_ns, msg, ts)]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "protocol": f"{rawpcm.PROTOCOL}/{rawpcm.VERSION}",
            "framing": self.framing,
            "sample_rate": self.uplink_rate,
        }


def create(**options: Any) -> RawPcmDialect:
    return RawPcmDialect(**options)
