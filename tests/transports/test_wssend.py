"""send_message: what websockets' send() would do, without its per-send context manager.

Real websockets server on loopback: every message arrives, in order, text as text and
bytes as bytes; a peer that stops reading makes the sender wait (the drain), as send()
does; a closed connection raises ConnectionClosed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rig.transports.wssend import can_write_now, send_message, write_binary_now, write_now


@contextlib.asynccontextmanager
async def _server(handler: object) -> AsyncIterator[str]:
    async with serve(handler, "127.0.0.1", 0, compression=None, close_timeout=0.5) as server:  # type: ignore[arg-type]
        port = list(server.sockets)[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


def _collector() -> tuple[list[str | bytes], asyncio.Event, Any]:
    """A server handler keeping every message it gets, in order; the event: the peer closed."""
    got: list[str | bytes] = []
    done = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        async for msg in ws:
            got.append(msg)
        done.set()

    return got, done, handler


async def test_every_message_arrives_in_order_with_its_type() -> None:
    got, done, handler = _collector()
    sent: list[str | bytes] = []
    for i in range(500):
        sent.append(os.urandom(640) if i % 3 else f'{{"seq":{i}}}')
    async with _server(handler) as url, connect(url, compression=None) as ws:
        for msg in sent:
            await send_message(ws, msg)
        await ws.close()
        await asyncio.wait_for(done.wait(), 5)
    assert got == sent


async def test_a_peer_that_stops_reading_blocks_the_sender() -> None:
    stop = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        ws.transport.pause_reading()  # the peer stops reading: our window fills
        await stop.wait()

    async with _server(handler) as url, connect(url, compression=None) as ws:
        assert isinstance(ws, ClientConnection)
        blocked = False
        try:
            async with asyncio.timeout(1):
                for _ in range(2_000):  # 32 MB: far more than socket buffers hold
                    await send_message(ws, b"\0" * 16_000)
        except TimeoutError:
            blocked = True
        assert blocked
        assert ws.paused
        stop.set()
        ws.transport.abort()


async def test_a_closed_connection_raises_connection_closed() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.close()

    async with _server(handler) as url, connect(url, compression=None) as ws:
        await asyncio.wait_for(ws.wait_closed(), 5)
        with pytest.raises(ConnectionClosed):
            await send_message(ws, b"x")
        with pytest.raises(ConnectionClosed):
            await send_message(ws, "x")


async def test_write_now_sends_in_order_and_stops_offering_when_the_peer_stops_reading() -> None:
    got, done, handler = _collector()
    sent: list[str | bytes] = []
    async with _server(handler) as url, connect(url, compression=None) as ws:
        for i in range(300):
            batch = [os.urandom(640), f'{{"seq":{i}}}'] if i % 2 else [os.urandom(320)]
            assert can_write_now(ws)
            write_now(ws, batch)
            sent.extend(batch)
            if i % 50 == 0:
                await send_message(ws, "mixed")  # the awaited path keeps the order
                sent.append("mixed")
        await ws.close()
        await asyncio.wait_for(done.wait(), 5)
    assert got == sent

    stop = asyncio.Event()

    async def deaf(ws: ServerConnection) -> None:
        ws.transport.pause_reading()
        await stop.wait()

    async with _server(deaf) as url, connect(url, compression=None) as ws:
        n = 0
        while can_write_now(ws) and n < 5_000:  # never waits: the buffers fill, then no
            write_now(ws, [b"\0" * 16_000])
            n += 1
        assert not can_write_now(ws) and ws.paused and n < 5_000
        stop.set()
        ws.transport.abort()
    await asyncio.sleep(0)
    assert not can_write_now(ws)


@pytest.mark.parametrize("n", [0, 1, 125, 126, 640, 65535, 65536, 70000])
def test_a_binary_frame_is_what_websockets_parses_back(n: int) -> None:
    """Our framing against websockets' own parser (the server side of a client's frame, and
    the client side of a server's), at every length boundary of RFC 6455's header."""
    from websockets.frames import Frame, Opcode
    from websockets.streams import StreamReader

    from rig.transports.wssend import _FIN_PING, _FIN_TEXT, binary_frame

    data = os.urandom(n)
    text = ("é" * n)[: max(0, n // 2)].encode()
    cases = [(data, 0x82, Opcode.BINARY), (text, _FIN_TEXT, Opcode.TEXT)]
    if n < 126:  # a control frame's payload is at most 125 bytes
        cases.append((data, _FIN_PING, Opcode.PING))
    for payload, first, opcode in cases:
        for mask in (True, False):
            reader = StreamReader()
            reader.feed_data(binary_frame(payload, mask, first))
            parser = Frame.parse(reader.read_exact, mask=mask)
            with pytest.raises(StopIteration) as stop:
                next(parser)
            frame = stop.value.value
            assert frame.opcode is opcode and frame.fin and bytes(frame.data) == payload
            # byte for byte what websockets' own serializer makes, but for the masking key
            mine = binary_frame(payload, False, first)
            theirs = Frame(opcode, payload).serialize(mask=False, extensions=[])
            assert mine == theirs


def test_masking_keys_differ_and_refill() -> None:
    from rig.transports.wssend import _MaskKeys

    keys = _MaskKeys(block=8)  # two keys per block: the refill path runs
    got = [keys.take() for _ in range(64)]
    assert all(len(k) == 4 for k in got)
    assert len(set(got)) > 60  # random 32-bit keys: a repeat in 64 is ~1e-6


async def test_a_connection_with_compression_still_goes_through_websockets() -> None:
    """permessage-deflate changes the frame (RSV1, the payload): the fast framing stays out."""
    got: list[bytes] = []
    done = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        async for msg in ws:
            got.append(msg)  # type: ignore[arg-type]
        done.set()

    sent = [bytes(640), os.urandom(300)]
    async with serve(handler, "127.0.0.1", 0, close_timeout=0.5) as server:  # deflate on
        port = list(server.sockets)[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as ws:
            assert ws.protocol.extensions  # negotiated
            assert not write_binary_now(ws, sent[0])  # not its case: nothing written
            write_now(ws, sent)
            await ws.close()
            await asyncio.wait_for(done.wait(), 5)
    assert got == sent


async def test_one_binary_message_written_straight_keeps_the_order() -> None:
    """write_binary_now between write_now and awaited sends: every message, in order; with
    output already waiting in the protocol it writes nothing and says so."""
    got, done, handler = _collector()
    sent: list[str | bytes] = []
    async with _server(handler) as url, connect(url, compression=None) as ws:
        for i in range(200):
            data = os.urandom(640 if i % 3 else 100_000)  # 16- and 64-bit lengths too
            if i % 7 == 0 or not can_write_now(ws):  # the awaited path (or a full buffer)
                await send_message(ws, data)
            else:
                assert write_binary_now(ws, data)
            sent.append(data)
            if i % 10 == 0 and can_write_now(ws):
                write_now(ws, [f"t{i}"])
                sent.append(f"t{i}")
        ws.protocol.send_text(b"queued")  # output waiting in the protocol: not this path
        assert not write_binary_now(ws, b"x")
        ws.send_data()
        sent.append("queued")
        await ws.close()
        await asyncio.wait_for(done.wait(), 5)
    assert got == sent
