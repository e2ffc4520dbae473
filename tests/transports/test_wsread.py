"""Reads into a per-thread buffer (rig/transports/wsread.py): every connection class that
rig reads WebSocket traffic through is read with recv_into, still closes through websockets'
own methods, and carries every byte of messages from one byte to past the buffer's size,
on asyncio's loop and on uvloop (which reads into its own buffer), over real loopback
sockets."""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.connection import Connection
from websockets.asyncio.server import ServerConnection, serve

from rig.clock.base import MonotonicClock
from rig.transports import wsread
from rig.transports.websocket import StampedConnection, StampedServerConnection, stamping
from rig.transports.wsdirect import DirectConnection
from rig.transports.wsstamps import ArrivalStamps

CLASSES = [StampedConnection, StampedServerConnection, DirectConnection]
#: around the header-length boundaries, a typical frame, and more than one read's buffer
SIZES = [1, 125, 126, 656, 65_535, 65_536, wsread.READ_BYTES + 17, 3 * wsread.READ_BYTES]
LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_each_connection_class_is_read_into_a_buffer_and_ends_as_websockets_does(
    cls: type,
) -> None:
    assert issubclass(cls, asyncio.BufferedProtocol)  # asyncio then reads with recv_into
    # BufferedProtocol's no-op stubs must not shadow the connection's own
    assert cls.eof_received is Connection.eof_received
    # ArrivalStamps closes its own reader's descriptor first (rig.transports.kreader), then
    # hands on to websockets' (as `super()` does: tests/transports/test_kstamp.py)
    assert cls.connection_lost in (Connection.connection_lost, ArrivalStamps.connection_lost)
    # the buffer is ours (ArrivalStamps cuts it at a frame's end, then asks BufferedReads)
    assert cls.get_buffer in (wsread.BufferedReads.get_buffer, ArrivalStamps.get_buffer)


class _Counting:
    """Counts buffered reads on top of the real methods."""

    reads = 0

    def buffer_updated(self, nbytes: int) -> None:
        type(self).reads += 1
        super().buffer_updated(nbytes)  # type: ignore[misc]


class CountingServer(_Counting, StampedServerConnection):
    reads = 0


class CountingClient(_Counting, StampedConnection):
    reads = 0


def _run(loop_name: str, coro: object) -> None:
    if loop_name == "uvloop":
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    with runner:
        runner.run(coro)  # type: ignore[arg-type]


@pytest.mark.parametrize("loop_name", LOOPS)
def test_messages_of_every_size_arrive_whole_and_in_order_both_ways(loop_name: str) -> None:
    clock = MonotonicClock()
    payloads = [os.urandom(n) for n in SIZES] + ["text é", b""]
    CountingServer.reads = CountingClient.reads = 0

    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async def main() -> None:
        async with serve(
            echo,
            "127.0.0.1",
            0,
            create_connection=stamping(CountingServer, clock),
            max_size=None,
        ) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(
                f"ws://127.0.0.1:{port}",
                create_connection=stamping(CountingClient, clock),
                max_size=None,
            ) as ws:
                for p in payloads:
                    await ws.send(p)
                got = [await ws.recv() for _ in payloads]
                assert got == payloads
                # one arrival stamp per message (the transport takes them; nobody did here)
                stamps = list(ws.stamps)
                assert len(stamps) == len(payloads) and stamps == sorted(stamps)

    _run(loop_name, main())
    if loop_name == "uvloop":
        # uvloop reads an asyncio.Protocol into its own loop buffer and never asks for ours
        assert CountingServer.reads == CountingClient.reads == 0
        return
    # the reads went through the buffer on both ends (the old classes had no buffer_updated);
    # the three-buffer message alone takes at least three of them
    assert CountingServer.reads >= 3 and CountingClient.reads >= 3
