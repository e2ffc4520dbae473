"""Whole simple frames parsed outside websockets' parser (rig.transports.wsframes) make the very
events websockets would: any stream of frames (data, pongs, pings, closes, fragments, frames
over the size limit, bad headers, garbage), cut into reads anywhere, on either side, gives the
same events, the same bytes to send back and the same end state as websockets alone. And on a
real connection the fast path is taken (a check that silently never passes would measure
nothing)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side

from rig.transports import wsframes
from rig.transports.wsdirect import DirectConnection

MAX_SIZE = 300  # small, so frames over the limit are drawn too


def _wire(opcode: int, payload: bytes, *, fin: bool, rsv: int, masked: bool, key: bytes) -> bytes:
    """One frame's bytes as a peer may send them, valid or not (any opcode, RSV bits)."""
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    n = len(payload)
    m = 0x80 if masked else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if not masked:
        return head + payload
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


@st.composite
def _frames(draw: Any, masked: bool) -> bytes:
    kind = draw(
        st.sampled_from(
            ["text", "binary", "pong", "ping", "close", "frag", "frag1", "rsv", "mask", "bad"]
        )
    )
    size = draw(st.sampled_from([0, 1, 5, 125, 126, 127, 200, 300, 301, 70_000]))
    payload = draw(st.binary(min_size=min(size, 8), max_size=min(size, 8))) * (size // 8 + 1)
    payload = payload[:size]
    key = draw(st.binary(min_size=4, max_size=4))
    fin, rsv, op, m = True, 0, 2, masked
    if kind == "text":
        op, payload = 1, ("é" * size).encode()[:size]  # may cut a character: bad UTF-8 too
    elif kind in ("pong", "ping"):
        op, payload = (10 if kind == "pong" else 9), payload[: draw(st.sampled_from([4, 125]))]
    elif kind == "close":
        op, payload = 8, struct.pack("!H", 1000) + b"bye"
    elif kind == "frag":
        first = _wire(1, b"ab", fin=False, rsv=0, masked=masked, key=key)
        return first + _wire(0, b"cd", fin=True, rsv=0, masked=masked, key=key)
    elif kind == "frag1":  # a message's first fragment: what follows must continue it
        return _wire(2, payload[:50], fin=False, rsv=0, masked=masked, key=key)
    elif kind == "rsv":
        rsv = draw(st.sampled_from([1, 2, 4]))
    elif kind == "mask":
        m = not masked
    elif kind == "bad":
        return draw(st.binary(min_size=1, max_size=6))
    return _wire(op, payload, fin=fin, rsv=rsv, masked=m, key=key)


def _events(p: Protocol) -> list[tuple[Any, ...]]:
    return [(e.opcode, bytes(e.data), e.fin) for e in p.events_received()]


def _sent(p: Protocol) -> tuple[list[tuple[Any, ...]], bool]:
    """What `p` writes back: its frames (unmasked: a client masks with a random key) and
    whether it ends the stream."""
    writes = p.data_to_send()
    peer = Protocol(Side.CLIENT if p.side is Side.SERVER else Side.SERVER, max_size=None)
    peer.receive_data(b"".join(writes))
    return _events(peer), writes[-1:] == [b""]


def _feed(p: Protocol, reads: list[bytes], fast: bool) -> tuple[list[tuple[Any, ...]], int]:
    out: list[tuple[Any, ...]] = []
    taken = 0
    for data in reads:
        if p.state.name == "CLOSED":
            break
        if fast and wsframes.can_take(p):
            frames, used = wsframes.take_frames(p, data)
            taken += used
            out += [(f.opcode, bytes(f.data), f.fin) for f in frames]
            data = data[used:]
            if not data:
                continue
        p.receive_data(data)
        out += _events(p)
    return out, taken


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    side=st.sampled_from([Side.SERVER, Side.CLIENT]),
    data=st.data(),
)
def test_the_same_events_replies_and_state_as_websockets_alone(side: Side, data: Any) -> None:
    masked = side is Side.SERVER  # what a server receives is masked
    frames = data.draw(st.lists(_frames(masked), min_size=1, max_size=8))
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    reads = [r for r in reads if r]
    mine, ref = Protocol(side, max_size=MAX_SIZE), Protocol(side, max_size=MAX_SIZE)
    got, _ = _feed(mine, reads, fast=True)
    want, _ = _feed(ref, reads, fast=False)
    assert got == want
    assert _sent(mine) == _sent(ref)  # pongs, closes: the same frames back
    assert mine.state is ref.state and mine.close_rcvd == ref.close_rcvd
    assert type(mine.parser_exc) is type(ref.parser_exc)


def test_this_websockets_is_one_the_fast_path_knows(monkeypatch: pytest.MonkeyPatch) -> None:
    assert wsframes.SUPPORTED  # the tests above would pass by never taking a frame
    p = Protocol(Side.SERVER)
    assert wsframes.can_take(p)
    monkeypatch.setattr(wsframes, "SUPPORTED", False)  # an older websockets: all its way
    assert not wsframes.can_take(p)


def test_whole_simple_frames_are_taken_and_the_rest_left_at_a_boundary() -> None:
    key = b"\x01\x02\x03\x04"
    audio = _wire(2, b"\x00\x01" * 330, fin=True, rsv=0, masked=True, key=key)  # 126 form
    pong = _wire(10, b"rigp1", fin=True, rsv=0, masked=True, key=key)
    ping = _wire(9, b"hi", fin=True, rsv=0, masked=True, key=key)
    p = Protocol(Side.SERVER)
    assert wsframes.can_take(p)
    frames, used = wsframes.take_frames(p, audio + pong + ping + audio)
    assert [f.opcode for f in frames] == [Opcode.BINARY, Opcode.PONG]
    assert frames[0].data == b"\x00\x01" * 330 and frames[1].data == b"rigp1"
    assert used == len(audio) + len(pong)  # the ping and all after it: websockets'
    p.receive_data(audio[:3])  # half a frame read by websockets: not at a boundary now
    assert not wsframes.can_take(p)
    p.receive_data(audio[3:])
    assert [e.opcode for e in p.events_received()] == [Opcode.BINARY]
    assert wsframes.can_take(p)  # whole again


def test_no_fast_frame_inside_a_fragmented_message_or_with_an_extension() -> None:
    first = _wire(2, b"ab", fin=False, rsv=0, masked=False, key=b"")
    whole = _wire(2, b"cd", fin=True, rsv=0, masked=False, key=b"")
    mine, ref = Protocol(Side.CLIENT), Protocol(Side.CLIENT)
    assert _feed(mine, [first, whole], fast=True) == (_feed(ref, [first, whole], False)[0], 0)
    assert mine.state is ref.state and mine.close_sent == ref.close_sent  # a 1002 close
    p = Protocol(Side.CLIENT)
    p.extensions = [object()]  # type: ignore[list-item]  # payloads rewritten: websockets'
    assert not wsframes.can_take(p)
    q = Protocol(Side.CLIENT)
    q.debug = True  # websockets logs each frame it parses: left to it
    assert not wsframes.can_take(q)


def test_a_payload_after_its_header_is_never_read_as_a_frame() -> None:
    inner = _wire(2, b"xy", fin=True, rsv=0, masked=False, key=b"")  # looks like a frame
    outer = _wire(2, inner, fin=True, rsv=0, masked=False, key=b"")
    p = Protocol(Side.CLIENT)
    p.receive_data(outer[:2])  # the header: consumed, the reader's buffer is empty again
    assert not p.reader.buffer and not wsframes.can_take(p)
    assert _feed(p, [outer[2:]], fast=True) == ([(Opcode.BINARY, inner, True)], 0)


def test_a_real_connection_takes_its_messages_on_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: list[int] = []
    real = wsframes.take_frames

    def counted(protocol: Any, data: bytes) -> tuple[list[Frame], int]:
        frames, used = real(protocol, data)
        taken.append(len(frames))
        return frames, used

    monkeypatch.setattr(wsframes, "take_frames", counted)
    got: list[bytes | str] = []

    async def handler(ws: ServerConnection) -> None:
        async for message in ws:
            got.append(message)
            if message == "end":
                await ws.send("bye")

    async def main() -> str | bytes:
        async with serve(
            handler, "127.0.0.1", 0, create_connection=DirectConnection, compression=None
        ) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}", compression=None) as ws:
                for i in range(20):
                    await ws.send(bytes([i]) * 640)
                    await asyncio.sleep(0.002)
                await ws.send("end")
                return await ws.recv()

    assert asyncio.run(main()) == "bye"
    assert got == [bytes([i]) * 640 for i in range(20)] + ["end"]  # all, in order
    assert sum(taken) >= 15, taken  # the server's reads, nearly all on the fast path
