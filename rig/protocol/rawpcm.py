"""The rig's own raw-PCM WebSocket protocol ("rig-pcm", version 1). No I/O here.

Text messages are JSON objects with a `type`; binary messages carry audio. With the default
`rig1` framing every binary message starts with a 16-byte header:

    offset 0  4 bytes  magic b"RPCM"
    offset 4  uint32   seq (per direction, from 0), little-endian
    offset 8  float64  ts_ms: sender's clock in ms when the chunk was sent (NaN = unknown)
    offset 16 ...      mono PCM16 little-endian samples

With `raw` framing (asked for in `hello`) binary messages are bare PCM16 samples.
See docs/protocol.md for the message list.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16, pcm_from_bytes
from rig.errors import ProtocolError
from rig.limits import MAX_TS_MS, remote_ts_ms
from rig.safejson import loads_remote

PROTOCOL = "rig-pcm"
VERSION = 1
MAGIC = b"RPCM"
HEADER = struct.Struct("<4sId")
HEADER_BYTES = HEADER.size  # 16
MAX_TEXT_BYTES = 1 << 20
#: the dtype of a native int16 array where that is little-endian (None elsewhere)
_LE_I16 = np.dtype(np.int16) if np.dtype(np.int16) == np.dtype("<i2") else None


@dataclass(frozen=True, slots=True)
class AudioFrame:
    seq: int
    ts_ms: float | None
    pcm: Pcm16


def encode_audio(pcm: Pcm16, seq: int, ts_ms: float | None, framing: str = "rig1") -> bytes:
    # native int16 on a little-endian machine: its bytes as they are (no dtype per frame)
    body = pcm.tobytes() if pcm.dtype is _LE_I16 else np.asarray(pcm, dtype="<i2").tobytes()
    if framing == "raw":
        return body
    return HEADER.pack(MAGIC, seq & 0xFFFFFFFF, math.nan if ts_ms is None else ts_ms) + body


def decode_audio(data: bytes, framing: str = "rig1", seq_if_raw: int = 0) -> AudioFrame:
    if framing == "raw":
        try:
            return AudioFrame(seq_if_raw, None, pcm_from_bytes(data))
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
    if len(data) < HEADER_BYTES:
        raise ProtocolError(f"binary message of {len(data)} bytes is shorter than the header")
    magic, seq, ts_ms = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad audio magic {magic!r}")
    try:
        pcm = pcm_from_bytes(data[HEADER_BYTES:])
    except ValueError as exc:
        raise ProtocolError(str(exc)) from exc
    if math.isnan(ts_ms):
        return AudioFrame(seq, None, pcm)
    if not abs(ts_ms) <= MAX_TS_MS:  # infinite or out of range (the message built only then)
        remote_ts_ms(ts_ms, f"audio frame {seq}")
    return AudioFrame(seq, ts_ms, pcm)


def encode_text(msg_type: str, **fields: Any) -> str:
    return json.dumps({"type": msg_type, **fields}, separators=(",", ":"))


def decode_text(data: str) -> dict[str, Any]:
    if len(data) > MAX_TEXT_BYTES:
        raise ProtocolError(f"text message of {len(data)} bytes is too long")
    msg = loads_remote(data, "text message", max_bytes=MAX_TEXT_BYTES)
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError("text message is not an object with a string 'type'", data[:200])
    return msg


def hello(sample_rate: int, framing: str = "rig1", **extra: Any) -> str:
    return encode_text(
        "hello",
        protocol=PROTOCOL,
        version=VERSION,
        sample_rate=sample_rate,
        channels=1,
        format="s16le",
        framing=framing,
        **extra,
    )
