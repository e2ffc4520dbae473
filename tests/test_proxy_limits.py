"""`rig proxy` against hostile clients (issue #15 row 11): a message size limit, an idle
timeout, and a connection's metrics.json (its `proxy` block) written however it ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from rig.proxy import RecordingProxy

pytestmark = pytest.mark.realtime


async def _echo(ws) -> None:  # type: ignore[no-untyped-def]
    async for message in ws:
        await ws.send(message)


def _metrics(root: Path, conn: int = 1) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (root / "rollouts" / f"conn-{conn:04d}" / "metrics.json").read_text()
    )
    return data


def _summary(root: Path, conn: int = 1) -> dict[str, Any]:
    proxy: dict[str, Any] = _metrics(root, conn)["proxy"]
    return proxy


METRICS = Path("rollouts") / "conn-0001" / "metrics.json"


async def _wait_for(path: Path, timeout_s: float = 5.0) -> None:
    """The summary is written off the loop after the connection ends."""
    for _ in range(int(timeout_s / 0.05)):
        if await asyncio.to_thread(path.exists):
            return
        await asyncio.sleep(0.05)


async def test_oversized_message_closes_with_1009_and_is_summarised(tmp_path: Path) -> None:
    async with serve(_echo, "127.0.0.1", 0, max_size=None) as upstream:
        port = upstream.sockets[0].getsockname()[1]
        out = tmp_path / "p"
        proxy = RecordingProxy(f"ws://127.0.0.1:{port}", str(out), max_message_bytes=1 << 20)
        url = await proxy.start()
        ws = await connect(url, max_size=None)
        await ws.send("small")
        assert await ws.recv() == "small"
        await ws.send(b"\0" * (4 << 20))  # 4 MiB: over the proxy's limit
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 5)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
        await _wait_for(out / METRICS)
        await proxy.stop()
    s = _summary(out)
    assert s["messages"] == {"up": 1, "down": 1}
    assert "too big" in str(s["error"]) or s["closed_by"] == "limit"
    # "small" is not the rig protocol: one protocol error per direction, and forwarded all
    # the same
    assert s["protocol_errors"] == 2 and _metrics(out)["status"] == "protocol_error"


async def test_deeply_nested_text_is_forwarded_and_logged(tmp_path: Path) -> None:
    async with serve(_echo, "127.0.0.1", 0, max_size=None) as upstream:
        port = upstream.sockets[0].getsockname()[1]
        out = tmp_path / "p"
        proxy = RecordingProxy(f"ws://127.0.0.1:{port}", str(out))
        url = await proxy.start()
        deep = "[" * 100_000 + "]" * 100_000
        async with connect(url, max_size=None) as ws:
            await ws.send(deep)
            assert await asyncio.wait_for(ws.recv(), 5) == deep
            await ws.send('{"type":"after"}')
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "after"
        await _wait_for(out / METRICS)
        await proxy.stop()
    s = _summary(out)
    assert s["messages"] == {"up": 2, "down": 2} and s["error"] is None
    lines = (out / "rollouts/conn-0001/events.jsonl").read_text().splitlines()
    events = [json.loads(x) for x in lines]
    # the nesting bomb is a protocol error each way (never a crash), the next message is
    # decoded again: an unknown type, recorded under the client's own name
    errors = [e for e in events if e["kind"] == "proxy.protocol_error"]
    assert [e["from"] for e in errors] == ["client", "upstream"]
    assert [e["message_kind"] for e in errors] == ["text", "text"]
    assert "client.after" in [e["kind"] for e in events]


async def test_idle_connection_is_closed_and_summarised(tmp_path: Path) -> None:
    async with serve(_echo, "127.0.0.1", 0) as upstream:
        port = upstream.sockets[0].getsockname()[1]
        out = tmp_path / "p"
        proxy = RecordingProxy(f"ws://127.0.0.1:{port}", str(out), idle_timeout_s=0.5)
        url = await proxy.start()
        async with connect(url) as ws:
            await ws.send("x")
            assert await ws.recv() == "x"
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 5)  # nothing either way for 0.5 s
        assert info.value.rcvd is not None and info.value.rcvd.code == 1001
        assert "idle" in info.value.rcvd.reason
        await _wait_for(out / METRICS)
        await proxy.stop()
    s = _summary(out)
    assert s["closed_by"] == "idle" and s["messages"] == {"up": 1, "down": 1}


async def test_client_that_vanishes_still_gets_a_summary(tmp_path: Path) -> None:
    async with serve(_echo, "127.0.0.1", 0) as upstream:
        port = upstream.sockets[0].getsockname()[1]
        out = tmp_path / "p"
        proxy = RecordingProxy(f"ws://127.0.0.1:{port}", str(out))
        url = await proxy.start()
        ws = await connect(url)
        await ws.send("x")
        await ws.recv()
        ws.transport.abort()  # no close frame
        await _wait_for(out / METRICS)
        await proxy.stop()
    assert _summary(out)["closed_by"] == "client"
