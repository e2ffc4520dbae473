"""`rig sim` against hostile clients (issue #15 row 12): a bad frame is answered with an
error and a 1008 close, queues are bounded, and a client that never says hello is closed."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from rig.protocol import rawpcm
from rig.sim.engine import SimConfig
from rig.sim.server import NetConfig, SimServer

pytestmark = pytest.mark.realtime


async def _closed(ws) -> tuple[list[str | bytes], int | None, str]:  # type: ignore[no-untyped-def]
    got: list[str | bytes] = []
    try:
        while True:
            got.append(await asyncio.wait_for(ws.recv(), 5))
    except ConnectionClosed as exc:
        rcvd = exc.rcvd
        return got, (rcvd.code if rcvd else None), (rcvd.reason if rcvd else "")


async def test_bad_frame_after_hello_gets_an_error_and_a_1008_close() -> None:
    sim = SimServer(SimConfig())
    url = await sim.start()
    try:
        ws = await connect(url)
        await ws.send(rawpcm.hello(16_000))
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(b"JUNK" + b"\0" * 60)  # bad magic
        for _ in range(300):  # then a flood: the server must already be closing
            try:
                await ws.send(b"\0" * (1 << 20))
            except ConnectionClosed:
                break
        got, code, reason = await _closed(ws)
    finally:
        await sim.stop()
    errors = [json.loads(m) for m in got if isinstance(m, str)]
    assert errors and errors[-1]["type"] == "error" and "magic" in errors[-1]["message"]
    assert code == 1008 and "magic" in reason
    assert sim.state.errors


async def test_client_that_never_says_hello_is_closed() -> None:
    sim = SimServer(SimConfig(), hello_timeout_s=0.5)
    url = await sim.start()
    try:
        ws = await connect(url)
        t0 = asyncio.get_running_loop().time()
        _, code, reason = await _closed(ws)
        waited = asyncio.get_running_loop().time() - t0
    finally:
        await sim.stop()
    assert code == 1008 and "hello" in reason
    assert 0.4 < waited < 3.0
    assert sim.state.active == 0


async def test_uplink_queue_is_bounded() -> None:
    # a 2 s uplink delay line: frames wait in the server; a flood must push back, not pile up
    sim = SimServer(SimConfig(), NetConfig(delay_up_ms=2000), max_queue=64)
    url = await sim.start()
    frame = rawpcm.encode_audio(__import__("numpy").zeros(8000, dtype="int16"), 0, None)
    try:
        ws = await connect(url)
        await ws.send(rawpcm.hello(16_000))
        await ws.recv()

        async def flood() -> None:
            for k in range(2000):
                await ws.send(frame)
                if k % 50 == 0:
                    await asyncio.sleep(0)

        task = asyncio.create_task(flood())
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises((asyncio.CancelledError, ConnectionClosed)):
            await task
        high = sim.state.queue_high_water
        ws.transport.abort()
    finally:
        await sim.stop()
    assert 0 < high <= 64
