"""One decode path for JSON the rig did not write itself (sans-I/O).

Why: `json.loads` on a peer's text raises `RecursionError` on deep nesting and `ValueError` on
integers over 4300 digits, and it quietly accepts `NaN`, `Infinity` and `1e400` (which becomes
`inf`). Those values then break arithmetic far from the socket (clock fits, sample maths) or
the strict JSON writer (a row that never reaches `chunks.jsonl`). Every decoder of untrusted
JSON (rig protocol, dialects, pipecat messages, MQTT, the proxy, the device clock, scenario
and run files) goes through `parse`, which either returns plain JSON data whose numbers are
finite and bounded and whose nesting is shallow, or raises `JsonInputError`. Callers turn that
into their own error: `loads_remote` -> `ProtocolError` (a peer), `ScenarioError` or
`DataFileError` (a file), never anything else.

Limits (documented in docs/reliability.md): nesting depth 64, integers of at most 20 digits
(a uint64 fits), floats finite, text at most `max_bytes` (callers pick; 16 MiB by default).
"""

from __future__ import annotations

import json
import math
from typing import Any

from rig.errors import ProtocolError

MAX_DEPTH = 64
MAX_INT_DIGITS = 20
DEFAULT_MAX_BYTES = 16 << 20
_EXCERPT = 200


class JsonInputError(ValueError):
    """Malformed or out-of-bounds JSON text; `reason` says which (no payload in it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise JsonInputError(f"integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError(f"number {text[:40]} is out of the float range")
    return value


def _parse_constant(name: str) -> Any:
    raise JsonInputError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
)


def parse(
    data: str | bytes | bytearray | memoryview,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """JSON data from text or UTF-8 bytes; `JsonInputError` for anything malformed."""
    if isinstance(data, bytes | bytearray | memoryview):
        if len(data) > max_bytes:
            raise JsonInputError(f"{len(data)} bytes of JSON (at most {max_bytes})")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonInputError(f"not UTF-8 at byte {exc.start}") from None
    elif isinstance(data, str):
        text = data
        if len(text) > max_bytes:  # characters: at least as many bytes
            raise JsonInputError(f"{len(text)} characters of JSON (at most {max_bytes})")
    else:
        raise JsonInputError(f"JSON text expected, got {type(data).__name__}")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        obj = _DECODER.decode(text)
    except JsonInputError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonInputError(
            f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise JsonInputError(
            f"nested deeper than the interpreter allows (limit {max_depth})"
        ) from None
    except (ValueError, OverflowError) as exc:
        raise JsonInputError(f"not JSON: {exc}") from None
    check_depth(obj, max_depth)
    return obj


def check_depth(obj: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise `JsonInputError` if containers nest deeper than `max_depth` (iterative walk)."""
    if not isinstance(obj, dict | list):
        return
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise JsonInputError(f"nested deeper than {max_depth} levels")
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))


def excerpt(data: object) -> str:
    """A short printable prefix of a message, for error records."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data[:_EXCERPT]).decode("utf-8", "replace")
    return str(data)[:_EXCERPT]


def loads_remote(
    data: str | bytes | bytearray | memoryview,
    what: str = "message",
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Any:
    """`parse` for what a peer sent: anything malformed is a `ProtocolError` naming `what`."""
    try:
        return parse(data, max_bytes=max_bytes)
    except JsonInputError as exc:
        raise ProtocolError(f"{what}: {exc.reason}", excerpt(data)) from None


def object_remote(
    data: str | bytes | bytearray | memoryview,
    what: str = "message",
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[str, Any]:
    """A JSON object from a peer, or `ProtocolError`."""
    obj = loads_remote(data, what, max_bytes=max_bytes)
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what}: expected a JSON object, got {_kind(obj)}", excerpt(data))
    return obj


def _kind(obj: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(obj), type(obj).__name__
    )
