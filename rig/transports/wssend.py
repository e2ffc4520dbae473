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
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State


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
    if isinstance(message, str):
        ws.protocol.send_text(message.encode())
    else:
        ws.protocol.send_binary(message)


def write_now(ws: Connection, messages: Iterable[str | bytes]) -> None:
    """Frame and write `messages` without waiting (only after `can_write_now`); a failed
    write ends the connection as `send()` does and raises ConnectionClosed."""
    for message in messages:
        _frame(ws, message)
    try:
        ws.send_data()
    except Exception as exc:
        ws.set_connection_exc(exc)
        ws.transport.abort()
        raise ConnectionClosed(None, None) from exc


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
