"""The rig's receive path inside `data_received` (`receive_into`), against real servers.

A small rig-pcm server on loopback sends a script of messages; the same script is read once
through `receive()` (websockets' `recv()` in a task, the reference) and once through
`receive_into`, which hands each message over from the socket's read for a dialect that
never answers what it decodes. Both must give the same items, stamps and endings: a clean
close, a connection lost mid-stream, an undecodable message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve

from rig.clock.base import MonotonicClock
from rig.core.events import DownAudio, DownEvent, Received
from rig.dialects.base import Message
from rig.dialects.rawpcm import RawPcmDialect
from rig.errors import ProtocolError, TransportError
from rig.protocol import rawpcm
from rig.transports.base import Transport
from rig.transports.websocket import WebSocketTransport

Script = Callable[[ServerConnection], Awaitable[None]]


def _pcm(k: int) -> np.ndarray:
    return np.full(320, 100 * (k + 1), dtype=np.int16)


async def _replies(ws: ServerConnection) -> None:
    """Audio, an event, a fragmented audio message, then a clean close."""
    await ws.send(rawpcm.encode_audio(_pcm(0), 0, 1000.0))
    await ws.send(rawpcm.encode_text("speech_started", server_ts_ms=1001.0))
    frame = rawpcm.encode_audio(_pcm(1), 1, 1020.0)
    await ws.send([frame[:100], frame[100:300], frame[300:]])  # three fragments
    await ws.send(rawpcm.encode_audio(_pcm(2), 2, 1040.0))
    await ws.close()


async def _replies_slowly(ws: ServerConnection) -> None:
    """The same, with time for answers before the close."""
    for k in range(3):
        await ws.send(rawpcm.encode_audio(_pcm(k), k, 1000.0 + 20 * k))
    await asyncio.sleep(0.3)
    await ws.close()


async def _lost(ws: ServerConnection) -> None:
    await ws.send(rawpcm.encode_audio(_pcm(0), 0, 1000.0))
    await asyncio.sleep(0.05)
    ws.transport.abort()  # no close frame: the connection is lost mid-stream


async def _garbage(ws: ServerConnection) -> None:
    await ws.send(rawpcm.encode_audio(_pcm(0), 0, 1000.0))
    await ws.send(b"\x01\x02\x03")  # too short for a rig1 frame header
    await asyncio.sleep(1.0)


@asynccontextmanager
async def _server(script: Script, answers: list[Any]) -> AsyncIterator[str]:
    async def handler(ws: ServerConnection) -> None:
        await ws.recv()  # hello
        await ws.send(rawpcm.encode_text("ready", sample_rate=16_000))
        await asyncio.sleep(0.05)  # the client is in its receive path before anything comes
        reader = asyncio.create_task(_collect(ws, answers))
        try:
            await script(ws)
        finally:
            reader.cancel()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/"


async def _collect(ws: ServerConnection, answers: list[Any]) -> None:
    async for message in ws:
        answers.append(message)


class _Answering(RawPcmDialect):
    """A dialect that answers every audio message (as Grok's answers a commit)."""

    def __init__(self) -> None:
        super().__init__(16_000)
        self._out: list[Message] = []

    def decode(self, message: Message, t_ns: int) -> list[Any]:
        items = super().decode(message, t_ns)
        if isinstance(message, bytes):
            self._out.append(rawpcm.encode_text("ack"))
        return items

    def take_outgoing(self) -> list[Message]:
        out, self._out = self._out, []
        return out


async def _read(
    script: Script, how: str, dialect: RawPcmDialect | None = None
) -> tuple[list[Received], BaseException | None, WebSocketTransport, list[Any]]:
    answers: list[Any] = []
    async with _server(script, answers) as url:
        t = WebSocketTransport(url, dialect or RawPcmDialect(16_000), MonotonicClock())
        await t.open()
        got: list[Received] = []
        error: BaseException | None = None
        try:
            async with asyncio.timeout(5):
                if how == "into":
                    await t.receive_into(got.append)
                else:
                    async for item in t.receive():
                        got.append(item)
        except (TransportError, ProtocolError) as exc:
            error = exc
        await t.close()
        return got, error, t, answers


def _view(items: list[Received]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for it in items:
        if isinstance(it, DownAudio):
            out.append(("audio", int(it.pcm[0]), it.pcm.size, it.server_ts_ms, it.extra))
        elif isinstance(it, DownEvent):
            data = {k: v for k, v in it.data.items() if k != "server_ts_ms"}
            out.append((it.kind, data, it.server_ts_ms))
    return out


async def test_same_items_and_a_clean_end_without_a_task_step() -> None:
    ref, ref_err, ref_t, _ = await _read(_replies, "iter")
    got, err, t, _ = await _read(_replies, "into")
    assert ref_err is None and err is None
    assert t.direct and not ref_t.direct
    assert _view(got) == _view(ref)
    assert [v[0] for v in _view(got)] == [
        "ready", "audio", "speech_started", "audio", "audio", "transport.closed",
    ]  # fmt: skip
    assert got[-1].data == {"clean": True}  # type: ignore[union-attr]
    # each message stamped when its last byte came off the socket, in order
    stamps = [it.t_ns for it in got[1:-1]]  # type: ignore[union-attr]
    assert stamps == sorted(stamps) and all(isinstance(s, int) and s > 0 for s in stamps)


async def test_a_connection_lost_mid_stream_is_a_transport_error() -> None:
    for how in ("iter", "into"):
        got, err, _, _ = await _read(_lost, how)
        assert isinstance(err, TransportError) and "connection lost mid-stream" in str(err), how
        assert [v[0] for v in _view(got)] == ["ready", "audio"], how


async def test_an_undecodable_message_is_a_protocol_error_after_what_came_before() -> None:
    for how in ("iter", "into"):
        got, err, _, _ = await _read(_garbage, how)
        assert isinstance(err, ProtocolError), (how, err)
        assert [v[0] for v in _view(got)] == ["ready", "audio"], how


async def test_a_fault_in_the_handler_ends_the_read_as_it_would_have() -> None:
    """A bug while handling one item (here a KeyError on the second) is raised out of
    `receive_into` both ways; nothing after it is handled."""
    for how in ("iter", "into"):
        seen: list[Received] = []

        def handle(item: Received, seen: list[Received] = seen) -> None:
            seen.append(item)
            if len(seen) == 2:
                raise KeyError("missing")

        async with _server(_replies_slowly, []) as url:
            t = WebSocketTransport(url, RawPcmDialect(16_000), MonotonicClock())
            await t.open()
            with pytest.raises(KeyError):
                async with asyncio.timeout(5):
                    if how == "into":
                        await t.receive_into(handle)
                    else:
                        await Transport.receive_into(t, handle)
            await t.close()
        assert [v[0] for v in _view(seen)] == ["ready", "audio"], how
        assert t.direct is (how == "into")


async def test_a_subclass_with_its_own_receive_is_read_through_it() -> None:
    class Wrapped(WebSocketTransport):
        async def receive(self) -> AsyncIterator[Any]:
            async for item in super().receive():
                yield ("wrapped", item)

    async with _server(_replies, []) as url:
        t = Wrapped(url, RawPcmDialect(16_000), MonotonicClock())
        await t.open()
        got: list[Any] = []
        async with asyncio.timeout(5):
            await t.receive_into(got.append)
        await t.close()
    assert not t.direct and len(got) == 6 and all(g[0] == "wrapped" for g in got)


async def test_a_dialect_that_answers_keeps_the_awaited_path() -> None:
    got, err, t, answers = await _read(_replies_slowly, "into", _Answering())
    assert err is None and not t.direct
    assert [v[0] for v in _view(got)][-1] == "transport.closed"
    assert answers.count(rawpcm.encode_text("ack")) == 3  # one per audio message, sent


@pytest.mark.realtime
async def test_a_rollout_receives_inside_data_received(tmp_path: Any) -> None:
    """A whole rollout against the reference system: the reply reaches system.wav the same."""
    from rig.audio.source import tone
    from rig.core.plan import PlanBuilder
    from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
    from rig.session import SessionConfig
    from rig.sim.engine import SimConfig
    from rig.sim.server import SimServer
    from rig.sim.thread import SimThread

    sim = SimThread(SimServer(SimConfig(latency_ms=50, endpoint_silence_ms=200, reply_s=0.4)))
    url = await asyncio.to_thread(sim.start)
    made: list[WebSocketTransport] = []

    def make(clock, gate):  # type: ignore[no-untyped-def]
        made.append(WebSocketTransport(url, RawPcmDialect(16_000), clock, open_gate=gate))
        return made[-1]

    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 0.6, 16_000)).add_silence(0.2)
    spec = RolloutSpec("r", plan.build(), make, {"url": "ws://sim/"}, {}, SessionConfig(
        drain_quiet_s=0.3, max_s=10.0))  # fmt: skip
    try:
        result = await Runner(str(tmp_path), RunnerSettings(run_id="x", analyze=False)).run([spec])
    finally:
        await asyncio.to_thread(sim.stop)
    assert made and made[0].direct
    m = result["results"]["r"]
    assert m["status"] == "ok", m
    assert m["downlink"]["chunks"] > 0 and m["responses"], m["downlink"]
    assert len(m["onsets_play_ns"]) == 1
