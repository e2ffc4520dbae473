"""The reference system's uplink read inside data_received (rig.sim.wsdirect): every message
reaches the engine once and in order, whether it came before the switch (a client that does
not wait for `ready`) or after, whole or in fragments; a bad message still gets its error and
a close."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from rig.protocol import rawpcm
from rig.sim.engine import SimConfig
from rig.sim.server import NetConfig, SimServer
from rig.transports.wsdirect import DirectConnection

pytestmark = pytest.mark.realtime


def _frame(seq: int) -> bytes:
    return rawpcm.encode_audio(np.full(320, seq, dtype=np.int16), seq, None)


async def _stream(net: NetConfig, wait_ready: bool) -> tuple[list[dict], list[bool], list[str]]:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "truth.jsonl")
        sim = SimServer(SimConfig(), net, truth_log=path)
        url = await sim.start()
        direct: list[bool] = []
        texts: list[str] = []
        try:
            async with connect(url) as ws:
                await ws.send(rawpcm.hello(16_000))
                if wait_ready:
                    assert json.loads(await ws.recv())["type"] == "ready"
                for seq in range(40):  # no wait at all: some may sit in the assembler
                    await ws.send(_frame(seq))
                await ws.send([_frame(40)[:100], _frame(40)[100:]])  # one message, two frames
                probe = rawpcm.encode_text("probe", id=7, t0_ns=1)
                await ws.send([probe[:5], probe[5:]])  # a fragmented text message
                for seq in range(41, 60):
                    await ws.send(_frame(seq))
                await asyncio.sleep(0.3)
                direct = [
                    c.direct for c in sim._server.connections if isinstance(c, DirectConnection)
                ]  # type: ignore[union-attr]
                while True:
                    try:
                        msg = await asyncio.wait_for(ws.recv(), 0.5)
                    except TimeoutError:
                        break
                    if isinstance(msg, str):
                        texts.append(json.loads(msg)["type"])
        finally:
            await sim.stop()
        lines = _lines(path)
    return [t for t in lines if t["event"] == "recv_chunk"], direct, texts


def _lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("wait_ready", [True, False])
async def test_every_frame_reaches_the_engine_once_in_order(wait_ready: bool) -> None:
    chunks, direct, texts = await _stream(NetConfig(), wait_ready)
    assert [c["seq"] for c in chunks] == list(range(60))
    assert all(c["n_samples"] == 320 for c in chunks)
    assert direct == [True]  # the connection did switch
    assert "probe_reply" in texts  # the fragmented probe was answered


async def test_with_an_uplink_delay_the_reader_stays_as_it_was() -> None:
    chunks, direct, _ = await _stream(NetConfig(delay_up_ms=20), True)
    assert [c["seq"] for c in chunks] == list(range(60))
    assert direct == [False]


async def test_a_bad_message_after_the_switch_gets_its_error_and_a_close() -> None:
    sim = SimServer(SimConfig())
    url = await sim.start()
    try:
        ws = await connect(url)
        await ws.send(rawpcm.hello(16_000))
        await ws.recv()
        await ws.send(_frame(0))
        await asyncio.sleep(0.1)
        assert [c.direct for c in sim._server.connections] == [True]  # type: ignore[union-attr, attr-defined]
        ws.protocol.send_text(b"\xff\xfe not utf-8")  # what a text message must never be
        ws.send_data()
        got: list[str | bytes] = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                got.append(await asyncio.wait_for(ws.recv(), 5))
    finally:
        await sim.stop()
    rcvd = closed.value.rcvd
    assert rcvd is not None and rcvd.code in (1007, 1008)
    if rcvd.code == 1008:  # ours (websockets may refuse the frame itself first: 1007)
        assert any(isinstance(m, str) and json.loads(m)["type"] == "error" for m in got)
    assert sim.state.active == 0
