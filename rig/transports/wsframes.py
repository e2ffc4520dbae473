"""Whole, simple WebSocket frames parsed without websockets' generator parser.

Why: on the reference system's loop, websockets' `receive_data` (its generator parser: a
`yield from` chain and three reads per frame) took 14 µs of the 98 µs an input chunk cost in
all at 100 streams (bench/loopcpu.py `--side sim`, issue #32); every reply chunk, probe
answer and pong on the rig's side paid the same.

What is taken here, and only then: the connection is OPEN with no extension, no fragmented
message under way, websockets' parser waiting for the first byte of a frame (its innermost
generator the reader's `at_eof`) with nothing buffered, and debug logging off. From the start
of a read, frames are taken while each is whole in it, final (FIN), without RSV bits, masked
exactly as this side expects, within the size limit, and a text, binary or pong frame of
under 64 KiB. They become the `Frame` events websockets' parser would have made (same
opcode, unmasked payload), for the connection's `process_event`, in order; the first byte of
anything else (a ping, a close, a fragment, a frame split across reads, a bad header) and all
after it go to websockets as before, which then answers, raises and closes exactly as it
does. For these frames websockets' `recv_frame` changes no state and writes nothing, so
nothing else is skipped. Any other shape of a future websockets reads as "not at a frame
boundary": every byte through websockets, never a frame parsed twice.
"""

from __future__ import annotations

from typing import Any

from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State
from websockets.streams import StreamReader

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - websockets built without its C extension
    from websockets.utils import apply_mask

#: opcodes taken here (text, binary, pong) by their wire value
_OPCODES = {1: Opcode.TEXT, 2: Opcode.BINARY, 10: Opcode.PONG}
_PARSE = Protocol.parse.__code__
_AT_EOF = StreamReader.at_eof.__code__
#: the protocol state read here, as websockets 17 names it (one without these: all its way)
_STATE = ("current_size", "max_message_size", "max_fragment_size", "extensions", "debug")
SUPPORTED = all(hasattr(Protocol(Side.SERVER), name) for name in _STATE)


def at_frame_boundary(protocol: Any) -> bool:
    """Is websockets' parser waiting for a new frame's first byte? Its innermost generator
    is then the reader's `at_eof` (which waits only on an empty buffer), called from
    `Protocol.parse` (not `discard`; a client's or server's `parse` delegates to it after
    the handshake); half way through a frame it is a `read_exact`."""
    parent, gen = None, getattr(protocol, "parser", None)
    for _ in range(8):  # a chain of generators: parse, then what it waits on
        sub = getattr(gen, "gi_yieldfrom", None)
        if sub is None:
            break
        parent, gen = gen, sub
    return getattr(gen, "gi_code", None) is _AT_EOF and getattr(parent, "gi_code", None) is _PARSE


def can_take(protocol: Any) -> bool:
    """May whole frames at the start of the next read be parsed here (see the module)?"""
    return (
        SUPPORTED
        and protocol.state is State.OPEN
        and not protocol.extensions
        and protocol.current_size is None
        and not protocol.debug
        and not protocol.reader.buffer
        and not protocol.reader.eof
        and at_frame_boundary(protocol)
    )


def take_frames(protocol: Any, data: bytes) -> tuple[list[Frame], int]:
    """The whole simple frames at the start of `data` (see the module) and how many bytes
    they span; call only when `can_take(protocol)`."""
    masked = protocol.side is Side.SERVER  # a client masks every frame, a server none
    limit = protocol.max_message_size
    frag = protocol.max_fragment_size
    if frag is not None:
        limit = frag if limit is None else min(limit, frag)
    frames: list[Frame] = []
    at, n = 0, len(data)
    while n - at >= 2:
        h1, h2 = data[at], data[at + 1]
        opcode = _OPCODES.get(h1 ^ 0x80)  # FIN set and RSV clear: the opcode, else None
        if opcode is None or bool(h2 & 0x80) is not masked:
            break
        length, head = h2 & 0x7F, at + 2
        if length == 126:
            if opcode is Opcode.PONG or n - at < 4:
                break  # a control frame's payload is at most 125 bytes: websockets says so
            length, head = (data[at + 2] << 8) | data[at + 3], at + 4
        elif length == 127:
            break  # 64 KiB or more: websockets' own path
        if limit is not None and length > limit:
            break
        body = head + 4 if masked else head
        end = body + length
        if end > n:
            break  # not whole in this read
        payload = data[body:end]
        if masked:
            payload = apply_mask(payload, data[head:body])
        frames.append(Frame(opcode, payload))
        at = end
    return frames, at
