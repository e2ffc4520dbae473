"""One WebSocket message out without websockets' per-send async context manager.

Why: `Connection.send` wraps every message in `send_context()`, an
`@asynccontextmanager` generator (entered, exited, a drain awaited), which cost about
half of the rig's uplink send path in a 50-rollout profile (docs/pacing.md, "Where a
frame's CPU goes"). The sans-I/O `Protocol` underneath frames the message; this writes
its bytes to the transport directly when nothing can go differently from `send()`:
connection OPEN, no fragmented message in progress, no close expected, the transport
neither closing nor paused. Anything else goes through `Connection.send()` unchanged.
After the write, a transport that became paused (the peer's window is full) is drained
here, as `send()` would, so a peer that stops reading still blocks the sender on the
same message and the session's send deadline still fires.

`write_now` is the synchronous half, for the session's tick (rig.sessiontick): it writes only
when `can_write_now` (the same conditions, and the transport not paused) and never waits; a
transport it leaves paused is drained by the next frame's `send_message`, as before.

A binary message on a connection without extensions (no permessage-deflate: the rig's own
connections) is framed here, not through `Frame.serialize`: the same bytes RFC 6455 asks
for, the masking key from `os.urandom` drawn 4 KiB at a time (one `getrandom` per 1 024
frames, not one per frame) instead of `secrets.token_bytes(4)` per frame; 1.7 -> 0.4 µs a
frame on the 2-core VM. Text messages and pings are framed the same way (their first byte
says so): `secrets.token_bytes` is a `getrandom` syscall per frame, and every syscall on the
loop's thread hands the GIL to a helper thread that wants it (the writer), after which the
loop waits for it back (docs/pacing.md, tenth pass: a debug sampler found it in the loop's
longest busy stretches). Anything else (extensions, a fragmented message, a logger at debug
level) goes through the sans-I/O protocol as before.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Iterable

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import Protocol, Side, State

try:  # websockets' C mask (its frames module picks it the same way)
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - a websockets built without its C extension
    from websockets.utils import apply_mask

_HEAD_SHORT = struct.Struct("!BB")
_HEAD_16 = struct.Struct("!BBH")
_HEAD_64 = struct.Struct("!BBQ")
_FIN_BINARY = 0x82  # FIN bit and opcode 2 (binary), no RSV bits: no extension touched it
_FIN_TEXT = 0x81  # FIN bit and opcode 1 (text)
_FIN_PING = 0x89  # FIN bit and opcode 9 (ping)


class _MaskKeys:
    """Masking keys (RFC 6455 5.3: from a strong source of entropy) out of `os.urandom`,
    read in blocks so that a frame does not cost a syscall."""

    def __init__(self, block: int = 4096) -> None:
        self._block = block
        self._buf = b""
        self._pos = 0

    def take(self) -> bytes:
        pos = self._pos
        if pos + 4 > len(self._buf):
            self._buf, pos = os.urandom(self._block), 0
        self._pos = pos + 4
        return self._buf[pos : pos + 4]


_KEYS = _MaskKeys()


def binary_frame(data: bytes, mask: bool, first: int = _FIN_BINARY) -> bytes:
    """One final binary frame of `data` (masked: a client's), as `Frame.serialize` builds it;
    `first`: its first byte (FIN and opcode: a text frame, a ping)."""
    n = len(data)
    bit = 0x80 if mask else 0
    if n < 126:
        head = _HEAD_SHORT.pack(first, bit | n)
    elif n < 65536:
        head = _HEAD_16.pack(first, bit | 126, n)
    else:
        head = _HEAD_64.pack(first, bit | 127, n)
    if not mask:
        return head + data
    key = _KEYS.take()
    return b"".join((head, key, apply_mask(data, key)))


def _plain(protocol: Protocol) -> bool:
    """Can a binary message skip `Frame.serialize` (nothing it would do differently)?"""
    return not (
        protocol.extensions
        or protocol.debug
        or protocol.expect_continuation_frame
        or protocol.state is not State.OPEN
    )


def can_write_now(ws: Connection) -> bool:
    """Can a message go out now exactly as `send()` would send it, without waiting?"""
    protocol = ws.protocol
    return not (
        ws.send_in_progress is not None
        or protocol.state is not State.OPEN
        or ws.paused
        or ws.transport.is_closing()
        or protocol.close_expected()
    )


def _frame(ws: Connection, message: str | bytes) -> None:
    """One message into the sans-I/O protocol's output (written by `send_data`)."""
    protocol = ws.protocol
    if not _plain(protocol):
        if isinstance(message, str):
            protocol.send_text(message.encode())
        else:
            protocol.send_binary(message)
    elif isinstance(message, str):
        protocol.writes.append(
            binary_frame(message.encode(), protocol.side is Side.CLIENT, _FIN_TEXT)
        )
    else:
        protocol.writes.append(binary_frame(message, protocol.side is Side.CLIENT))


def write_now(ws: Connection, messages: Iterable[str | bytes]) -> None:
    """Frame and write `messages` without waiting (only after `can_write_now`); a failed
    write ends the connection as `send()` does and raises ConnectionClosed."""
    for message in messages:
        _frame(ws, message)
    _send_data_now(ws)


def write_binary_now(ws: Connection, data: bytes) -> bool:
    """`write_now` of one binary message, after `can_write_now`, for the tick's most frames:
    its frame straight to the transport when the protocol holds no other output and
    `_plain` holds (the same bytes, the same failure as `write_now`, three calls instead of
    eight). False: nothing written (the caller uses `write_now`)."""
    protocol = ws.protocol
    if (
        protocol.writes
        or protocol.extensions
        or protocol.debug
        or protocol.expect_continuation_frame
    ):
        return False
    transport = ws.transport
    try:
        transport.write(binary_frame(data, protocol.side is Side.CLIENT))
    except Exception as exc:
        ws.set_connection_exc(exc)
        transport.abort()
        raise ConnectionClosed(None, None) from exc
    return True


def _send_data_now(ws: Connection) -> None:
    """Write what the protocol holds; a failed write ends the connection as `send()` does
    and raises ConnectionClosed (nothing awaited: the caller is the tick)."""
    try:
        ws.send_data()
    except Exception as exc:
        ws.set_connection_exc(exc)
        ws.transport.abort()
        raise ConnectionClosed(None, None) from exc


def ping_now(ws: Connection, payload: bytes) -> bool:
    """A ping written without waiting (only when `can_write_now`); False: not now (nothing
    was sent). Not registered with websockets' own pong waiters: the pong is unsolicited to
    it, and the caller learns of it from the connection's pong stamps (rig.net.pathsample)."""
    if not can_write_now(ws):
        return False
    protocol = ws.protocol
    if _plain(protocol) and len(payload) < 126:  # a control frame's payload is at most 125
        protocol.writes.append(binary_frame(payload, protocol.side is Side.CLIENT, _FIN_PING))
    else:
        protocol.send_ping(payload)
    _send_data_now(ws)
    return True


async def send_message(ws: Connection, message: str | bytes) -> None:
    """Send one complete text (str) or binary (bytes) message, as `ws.send(message)`."""
    if not can_write_now(ws):
        await ws.send(message)
        return
    _frame(ws, message)
    try:
        ws.send_data()
    except Exception as exc:  # as send_context(): a failed write ends the connection
        ws.set_connection_exc(exc)
        ws.transport.abort()
        await asyncio.shield(ws.connection_lost_waiter)
        raise ws.close_exc from exc
    if ws.paused:
        await ws.drain()
