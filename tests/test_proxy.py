"""`rig proxy`: a rollout through the recording proxy to the reference system."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from websockets.asyncio.server import serve

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.proxy import RecordingProxy, upstream_for
from rig.runner import RolloutSpec, Runner
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.transports.websocket import WebSocketTransport
from tests.support.wait import until

pytestmark = pytest.mark.realtime


def _spec(url: str) -> RolloutSpec:
    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 0.8, 16_000)).add_silence(0.5)

    def make(clock, gate):  # type: ignore[no-untyped-def]
        return WebSocketTransport(url, RawPcmDialect(16_000), clock, open_gate=gate, retries=0)

    return RolloutSpec("p", plan.build(), make, {"url": url}, {},
                       SessionConfig(drain_quiet_s=0.5, max_s=15))  # fmt: skip


def test_upstream_keeps_its_own_path_or_takes_the_clients() -> None:
    assert upstream_for("ws://h:1", "/v1/realtime?model=x") == "ws://h:1/v1/realtime?model=x"
    assert upstream_for("ws://h:1/fixed", "/other") == "ws://h:1/fixed"


async def test_rollout_through_the_proxy_is_logged_both_ways(tmp_path: Path) -> None:
    sim = SimServer(SimConfig(latency_ms=150, endpoint_silence_ms=300, reply_s=0.4))
    sim_url = await sim.start()
    proxy = RecordingProxy(sim_url, str(tmp_path / "proxy"))
    url = await proxy.start()
    result = await Runner(str(tmp_path / "runs"), run_id="r", clock=MonotonicClock()).run(
        [_spec(url)]
    )
    summary_file = tmp_path / "proxy" / "connections" / "0001" / "summary.json"
    await until(summary_file.exists, timeout_s=5, what="the proxy's connection summary")
    await proxy.stop()
    await sim.stop()
    m = result["results"]["p"]
    assert m["status"] == "ok" and m["responses"][0]["latency_ms"] is not None
    conn = tmp_path / "proxy" / "connections" / "0001"
    lines = [json.loads(x) for x in (conn / "messages.jsonl").read_text().splitlines()]
    summary = json.loads((conn / "summary.json").read_text())
    up_bin = [x for x in lines if x["dir"] == "up" and x["kind"] == "binary"]
    down_bin = [x for x in lines if x["dir"] == "down" and x["kind"] == "binary"]
    assert len(up_bin) == m["uplink"]["frames"]  # every uplink frame went through, logged
    assert len(down_bin) == m["downlink"]["chunks"]
    assert {"hello", "ready", "end"} <= {x.get("type") for x in lines}
    assert all(x["t_fwd_ns"] >= x["t_ns"] for x in lines)
    assert summary["messages"]["up"] == sum(x["dir"] == "up" for x in lines)
    assert summary["proxy_delay_ms"]["up"]["p50"] < 5.0  # the proxy adds little
    assert summary["closed_by"] == "client"


async def test_upstream_hang_up_is_passed_on_and_credentials_never_logged(tmp_path: Path) -> None:
    seen: dict[str, str] = {}

    async def upstream(ws) -> None:  # type: ignore[no-untyped-def]
        seen.update({k.lower(): v for k, v in ws.request.headers.raw_items()})
        await ws.recv()
        ws.transport.abort()  # dies mid-conversation

    server = await serve(upstream, "127.0.0.1", 0)
    port = next(iter(server.sockets)).getsockname()[1]
    proxy = RecordingProxy(f"ws://127.0.0.1:{port}", str(tmp_path / "proxy"))
    url = await proxy.start()
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(url, additional_headers={"Authorization": "Bearer sk-secret-9"}) as ws:
        await ws.send('{"type":"hello"}')
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
    summary_file = tmp_path / "proxy" / "connections" / "0001" / "summary.json"
    await until(summary_file.exists, timeout_s=5, what="the proxy's connection summary")
    await proxy.stop()
    server.close()
    assert seen.get("authorization") == "Bearer sk-secret-9"  # passed upstream...
    for f in (tmp_path / "proxy").rglob("*"):
        if f.is_file():
            assert b"sk-secret-9" not in f.read_bytes()  # ...and never written down
    summary = json.loads((tmp_path / "proxy" / "connections" / "0001" / "summary.json").read_text())
    assert summary["closed_by"] == "upstream"
