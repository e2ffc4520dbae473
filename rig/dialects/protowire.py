"""The protobuf wire format, just enough for pipecat's `frames.proto` (sans-I/O).

Varints, length-delimited fields and proto3 defaults: a message is a dict of field number ->
list of values (ints for varints, bytes for length-delimited). Unknown wire types 1 and 5
(fixed64 / fixed32) are skipped; groups (3, 4) are refused as garbage.
"""

from __future__ import annotations

from rig.errors import ProtocolError

VARINT = 0
LEN = 2


def varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1  # proto int64/uint64 two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3 | VARINT) + varint(value) if value else b""


def field_bytes(number: int, value: bytes, *, always: bool = False) -> bytes:
    if not value and not always:
        return b""
    return varint(number << 3 | LEN) + varint(len(value)) + value


def field_str(number: int, value: str) -> bytes:
    return field_bytes(number, value.encode("utf-8"))


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("protobuf: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtocolError("protobuf: varint too long")


def parse(buf: bytes) -> dict[int, list[int | bytes]]:
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wtype = key >> 3, key & 7
        if number == 0:
            raise ProtocolError("protobuf: field number 0")
        value: int | bytes
        if wtype == VARINT:
            value, pos = _read_varint(buf, pos)
        elif wtype == LEN:
            n, pos = _read_varint(buf, pos)
            if pos + n > len(buf):
                raise ProtocolError("protobuf: length-delimited field runs past the end")
            value, pos = bytes(buf[pos : pos + n]), pos + n
        elif wtype in (1, 5):
            size = 8 if wtype == 1 else 4
            if pos + size > len(buf):
                raise ProtocolError("protobuf: fixed field runs past the end")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise ProtocolError(f"protobuf: unsupported wire type {wtype}")
        fields.setdefault(number, []).append(value)
    return fields


def last_int(fields: dict[int, list[int | bytes]], number: int, default: int = 0) -> int:
    vals = fields.get(number)
    if not vals:
        return default
    v = vals[-1]
    if not isinstance(v, int):
        raise ProtocolError(f"protobuf: field {number} should be a varint")
    return v


def last_bytes(fields: dict[int, list[int | bytes]], number: int) -> bytes:
    vals = fields.get(number)
    if not vals:
        return b""
    v = vals[-1]
    if not isinstance(v, bytes):
        raise ProtocolError(f"protobuf: field {number} should be length-delimited")
    return v


def last_str(fields: dict[int, list[int | bytes]], number: int) -> str:
    try:
        return last_bytes(fields, number).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"protobuf: field {number} is not UTF-8") from exc
