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
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.connection import Connection
from websockets.protocol import State


async def send_message(ws: Connection, message: str | bytes) -> None:
    """Send one complete text (str) or binary (bytes) message, as `ws.send(message)`."""
    protocol = ws.protocol
    if (
        ws.send_in_progress is not None
        or protocol.state is not State.OPEN
        or ws.paused
        or ws.transport.is_closing()
        or protocol.close_expected()
    ):
        await ws.send(message)
        return
    if isinstance(message, str):
        protocol.send_text(message.encode())
    else:
        protocol.send_binary(message)
    try:
        ws.send_data()
    except Exception as exc:  # as send_context(): a failed write ends the connection
        ws.set_connection_exc(exc)
        ws.transport.abort()
        await asyncio.shield(ws.connection_lost_waiter)
        raise ws.close_exc from exc
    if ws.paused:
        await ws.drain()
