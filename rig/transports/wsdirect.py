"""Data messages handled inside the socket's `data_received`, not through `ws.recv()`.

Why: `async for message in ws` costs, per message, a future, an event and a task step in
websockets' Assembler: about a quarter of `rig sim`'s CPU at 100 streams (py-spy, issue
#32), more than its model does for a quiet chunk; on the rig's side every reply chunk, probe
answer and server event paid the same, plus an async generator step, in its receive task.

How this works: `DirectMessages` is a mixin of a websockets connection class: the reference
system's (`DirectConnection`) and the rig's client connection (rig.transports.websocket).
Once `switch` has been called, every complete data message goes to the given callback from
`process_event`, i.e. inside `data_received`, in arrival order (a fragmented message is
joined here first); pings, pongs and closes go on as before. The switch is made only while
websockets' assembler holds no frame (nothing read half or left unread), so no message can
overtake an earlier one; until then the caller reads the usual way. A callback that raises
(a bad frame) ends the direct mode: `until_closed` raises that exception in the reader, as
the awaited read would have.

Whole simple frames at the start of a read are parsed here too, not by websockets' generator
parser (rig.transports.wsframes): the same events, in the same order, through the same
`process_event`, direct mode or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from websockets.asyncio.connection import Connection
from websockets.asyncio.server import ServerConnection
from websockets.frames import DATA_OPCODES, Frame, Opcode
from websockets.protocol import Event

from rig.errors import ProtocolError
from rig.transports import wsframes
from rig.transports.wsread import BufferedReads

OnMessage = Callable[[str | bytes], None]


class DirectMessages:
    """Mixin for a websockets connection (before the Connection class among the bases): its
    data messages can be handed to a callback synchronously, after `switch`."""

    _on_message: OnMessage | None
    _parts: list[Frame]
    _failed: asyncio.Future[None] | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_message = None
        self._parts = []
        self._failed = None

    @property
    def direct(self) -> bool:
        """Are data messages handed over inside data_received now?"""
        return self._on_message is not None

    def data_received(self, data: bytes) -> None:
        protocol = self.protocol  # type: ignore[attr-defined]
        if wsframes.can_take(protocol):
            frames, used = wsframes.take_frames(protocol, data)
            for frame in frames:
                self.process_event(frame)
            if used == len(data):
                return
            data = data[used:]  # from a frame boundary: websockets' parser takes it on
        super().data_received(data)  # type: ignore[misc]

    def process_event(self, event: Event) -> None:
        handle = self._on_message
        if handle is None or not isinstance(event, Frame) or event.opcode not in DATA_OPCODES:
            super().process_event(event)  # type: ignore[misc]
            return
        if not event.fin or self._parts:  # a fragmented message: joined once it is whole
            self._parts.append(event)
            if not event.fin:
                return
            opcode = self._parts[0].opcode
            data: Any = b"".join(bytes(part.data) for part in self._parts)
            self._parts = []
        else:
            opcode, data = event.opcode, event.data
        try:
            if opcode is Opcode.TEXT:
                try:
                    message: str | bytes = bytes(data).decode()
                except UnicodeDecodeError:
                    raise ProtocolError("a text message that is not UTF-8") from None
            else:
                message = bytes(data)
            handle(message)
        except Exception as exc:  # noqa: BLE001 - raised in the reader (until_closed)
            self._on_message = None
            if self._failed is not None and not self._failed.done():
                self._failed.set_exception(exc)


class DirectConnection(BufferedReads, DirectMessages, ServerConnection, asyncio.BufferedProtocol):
    """The reference system's connection: data messages to a callback once switched (read into
    a buffer per thread, not a 256 KiB bytes object per read: rig.transports.wsread)."""


def switch(ws: Connection, handle: OnMessage) -> bool:
    """From now on hand every data message to `handle` inside `data_received`, if `ws` can
    do that now (a DirectMessages connection whose assembler holds nothing); False: read on
    as before."""
    if not isinstance(ws, DirectMessages) or ws._on_message is not None:
        return False
    if len(ws.recv_messages.frames):  # a frame read and not yet taken: it must go first
        return False
    ws._failed = ws.loop.create_future()
    ws._on_message = handle
    return True


def stop(ws: Connection) -> None:
    """Back to the usual reads: later messages wait in websockets' queue for `recv()`."""
    if isinstance(ws, DirectMessages):
        ws._on_message = None


async def until_closed(ws: Connection) -> None:
    """Wait until the connection is lost; raises what a message's handling raised."""
    assert isinstance(ws, DirectMessages) and ws._failed is not None, "switch() first"
    failed = ws._failed
    try:
        await asyncio.wait([failed, ws.connection_lost_waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        ws._on_message = None
    if failed.done():
        failed.result()
