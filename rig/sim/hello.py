"""The reference system's check of a client's hello (the raw-PCM protocol's first message).

Why apart: every field a client sends is untrusted; one function names what is accepted
and says why anything else is refused (a ProtocolError, answered with a 1008 close).
"""

from __future__ import annotations

from typing import Any

from rig.errors import ProtocolError
from rig.protocol import rawpcm


def parse_hello(first: Any, sample_rate: int) -> tuple[dict[str, Any], str, float | None]:
    """The hello, its framing, and the client's endpointer silence in ms (None: not set)."""
    if not isinstance(first, str):
        raise ProtocolError("expected a hello text message first")
    hello = rawpcm.decode_text(first)
    if hello.get("type") != "hello":
        raise ProtocolError(f"expected hello, got {hello.get('type')!r}")
    rate = hello.get("sample_rate")
    if rate != sample_rate:
        raise ProtocolError(
            f"sample_rate {rate!r} not supported: this sim runs at {sample_rate} Hz"
        )
    framing = str(hello.get("framing", "rig1"))
    if framing not in ("rig1", "raw"):
        raise ProtocolError(f"unknown framing {framing!r}")
    silence_ms = hello.get("endpoint_silence_ms")
    if silence_ms is None:
        return hello, framing, None
    if (
        isinstance(silence_ms, bool)
        or not isinstance(silence_ms, int | float)
        or not (0 <= silence_ms <= 60_000)
    ):
        raise ProtocolError(f"endpoint_silence_ms {silence_ms!r}: want 0..60000 ms")
    return hello, framing, float(silence_ms)
