"""Reading JSON the way protobuf's JSON parsers do (Gemini's wire format), sans-I/O.

Why: Google's services parse their JSON with protobuf, which accepts a field by its
lowerCamelCase JSON name or by its proto name (`mimeType` or `mime_type`), bytes as
standard or URL-safe base64 with or without padding, enums by name or number, and a
Duration as text (`"1.500s"`). The official google-genai client sends snake_case
top-level names (`realtime_input`, `client_content`) and URL-safe base64; a decoder that
knows only the camelCase spelling and standard base64 drops that client's audio and turns.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.errors import ProtocolError

_UPPER = re.compile(r"(?<!^)(?=[A-Z])")
_DURATION = re.compile(r"^(-?\d{1,12})(?:\.(\d{1,9}))?s$")


def proto_name(json_name: str) -> str:
    """`mimeType` -> `mime_type` (the proto field name a parser also accepts)."""
    return _UPPER.sub("_", json_name).lower()


def json_name(name: str) -> str:
    """`mime_type` -> `mimeType`; a lowerCamelCase name is returned as it is."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def get(obj: Any, name: str) -> Any:
    """Field `name` (its JSON name) of a JSON object in either spelling; None if absent."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    return obj.get(proto_name(name))


def has(obj: Any, name: str) -> bool:
    return isinstance(obj, dict) and (name in obj or proto_name(name) in obj)


def unknown(obj: dict[str, Any], known: Iterable[str]) -> list[str]:
    """Keys of `obj` that are none of `known` (JSON names) in either spelling."""
    names = set(known)
    return sorted(k for k in obj if json_name(k) not in names)


def enum_name(value: Any, names: tuple[str, ...]) -> str | None:
    """An enum given by name (any case, as the SDK's CaseInSensitiveEnum) or by number
    (`names` in number order); None if it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else None
    if isinstance(value, str) and value.upper() in names:
        return value.upper()
    return None


def duration_ms(value: Any) -> float | None:
    """A protobuf Duration in JSON (`"1.5s"`, `"-0.020s"`) in ms; None if it is not one."""
    if not isinstance(value, str):
        return None
    m = _DURATION.match(value.strip())
    if m is None:
        return None
    whole, frac = m.group(1), m.group(2) or "0"
    sign = -1.0 if whole.startswith("-") else 1.0
    return sign * (abs(int(whole)) * 1000.0 + int(frac.ljust(9, "0")) / 1e6)


def b64_bytes(data: object) -> bytes:
    """Bytes from base64 text, standard or URL-safe alphabet, padded or not."""
    if not isinstance(data, str):
        raise ProtocolError(f"audio payload is {type(data).__name__}, not base64 text")
    text = data.strip().translate(_URLSAFE)
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"audio payload is not valid base64: {exc}") from exc


def b64_pcm(data: object) -> Pcm16:
    """Little-endian PCM16 from protobuf-JSON bytes."""
    raw = b64_bytes(data)
    if len(raw) % 2:
        raise ProtocolError(f"PCM16 payload has an odd byte count ({len(raw)})")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


_URLSAFE = str.maketrans("-_", "+/")
