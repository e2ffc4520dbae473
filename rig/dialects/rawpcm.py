"""The rig's own protocol as a dialect, both sides. See rig.protocol.rawpcm.

Two-channel prefill: with `own_track` (the system's own past track, at the uplink rate) each
uplink frame that covers part of it is followed by an `own_audio` text message carrying the
same sample range of the own track (`start_sample`, base64 PCM16), so the server gets both
sides of the history in lockstep.

Client side (`decode_client`, for the recording proxy): the client's `hello` sets the rate
and framing of the connection (both directions); binary messages are its input audio;
`probe` and `end` keep their names.
"""

from __future__ import annotations

from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import DownAudio, DownEvent, Incoming, Outgoing, UpAudio, UpEvent
from rig.core.units import NS_PER_MS
from rig.dialects._wire import pcm_to_b64
from rig.dialects.base import Dialect, Message
from rig.dialects.endpointer import check_ms
from rig.errors import ProtocolError
from rig.limits import remote_rate, remote_ts_ms, remote_ts_ns
from rig.protocol import rawpcm


class RawPcmDialect(Dialect):
    name = "rig"

    def __init__(
        self,
        sample_rate: int = 16_000,
        framing: str = "rig1",
        own_track: Pcm16 | None = None,
        silence_duration_ms: int | None = None,
    ) -> None:
        if framing not in ("rig1", "raw"):
            raise ValueError(f"unknown framing {framing!r}")
        #: the server's endpointer silence, asked for in `hello` (rig sim honours it)
        self.silence_duration_ms = check_ms("rig", "silence_duration_ms", silence_duration_ms)
        self.own_track = own_track
        self._up_samples = 0
        self.uplink_rate = sample_rate
        self.downlink_rate = sample_rate
        self.framing = framing
        self._ready = False
        self._down_seq = 0
        self._up_seq = 0

    def headers(self) -> dict[str, str]:
        return {}

    def open_messages(self) -> list[Message]:
        extra = {}
        if self.silence_duration_ms is not None:
            extra["endpoint_silence_ms"] = self.silence_duration_ms
        return [rawpcm.hello(self.uplink_rate, self.framing, **extra)]

    @property
    def ready(self) -> bool:
        return self._ready

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        out: list[Message] = [rawpcm.encode_audio(pcm, seq, t_now_ns / NS_PER_MS, self.framing)]
        pos = self._up_samples
        self._up_samples += int(pcm.size)
        own = self.own_track
        if own is not None and pos < own.size:
            part = own[pos : pos + pcm.size]
            out.append(
                rawpcm.encode_text("own_audio", seq=seq, start_sample=pos, audio=pcm_to_b64(part))
            )
        return out

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

    def decode_client(self, message: Message, t_ns: int) -> list[Outgoing]:
        if isinstance(message, bytes):
            frame = rawpcm.decode_audio(message, self.framing, self._up_seq)
            self._up_seq += 1
            extra: dict[str, Any] = {"client_seq": frame.seq}
            if frame.ts_ms is not None:
                extra["client_ts_ms"] = frame.ts_ms
            return [UpAudio(frame.pcm, self.uplink_rate, t_ns, extra)]
        msg = rawpcm.decode_text(message)
        kind = msg.pop("type")
        if kind == "hello":
            rate = remote_rate(msg.get("sample_rate", self.uplink_rate), "hello")
            framing = msg.get("framing", self.framing)
            if framing not in ("rig1", "raw"):
                raise ProtocolError(f"hello: unknown framing {str(framing)[:40]!r}")
            self.uplink_rate = self.downlink_rate = rate
            self.framing = framing
            return [UpEvent("session", t_ns, {"sample_rate": rate, "framing": framing})]
        if kind == "probe":
            remote_ts_ns(msg.get("t0_ns", 0), "probe.t0_ns")
        return [UpEvent(kind, t_ns, {k: v for k, v in msg.items() if k in ("id", "t0_ns")})]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "protocol": f"{rawpcm.PROTOCOL}/{rawpcm.VERSION}",
            "framing": self.framing,
            "sample_rate": self.uplink_rate,
            "silence_duration_ms": self.silence_duration_ms,
            **(
                {"own_track_samples": int(self.own_track.size)}
                if self.own_track is not None
                else {}
            ),
        }


def create(**options: Any) -> RawPcmDialect:
    return RawPcmDialect(**options)
