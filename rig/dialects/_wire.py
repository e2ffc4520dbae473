"""Small pieces the JSON dialects share: base64 PCM16 and strict JSON objects (sans-I/O)."""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.dialects.base import Message
from rig.errors import ProtocolError
from rig.safejson import object_remote


def pcm_to_b64(pcm: Pcm16) -> str:
    """Little-endian PCM16 as base64 text (what the hosted APIs carry in JSON)."""
    return base64.b64encode(pcm.astype("<i2", copy=False).tobytes()).decode("ascii")


def b64_to_pcm(data: object) -> Pcm16:
    if not isinstance(data, str):
        raise ProtocolError(f"audio payload is {type(data).__name__}, not base64 text")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"audio payload is not valid base64: {exc}") from exc
    if len(raw) % 2:
        raise ProtocolError(f"PCM16 payload has an odd byte count ({len(raw)})")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


def load_object(message: Message) -> dict[str, Any]:
    """A JSON object from a text (or UTF-8 binary) message; anything else (deep nesting, huge
    integers, NaN, 1e400 included) is a ProtocolError (rig.safejson)."""
    return object_remote(message, "JSON message")


def dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def env_secret(*names: str) -> str | None:
    """The first of `names` set in the environment. The value never leaves the dialect."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


_SECRET_KEYS = frozenset({"client_secret", "api_key", "key", "token", "authorization"})


def scrub(obj: Any) -> Any:
    """A copy of a server payload without fields that may hold credentials."""
    if isinstance(obj, dict):
        return {
            k: ("<redacted>" if k.lower() in _SECRET_KEYS else scrub(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj
