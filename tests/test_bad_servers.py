"""Servers that send garbage or hang up: clear statuses, nothing lost, others unaffected."""

import asyncio
import json

import pytest
from websockets.asyncio.server import serve

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.runs.runner import RolloutSpec, RunHooks, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.transports.websocket import WebSocketTransport

pytestmark = pytest.mark.realtime


async def _garbage(ws) -> None:
    await ws.recv()
    await ws.send(json.dumps({"type": "ready", "sample_rate": 16000}))
    await asyncio.sleep(0.3)
    await ws.send("{this is not json")


async def _hang_up(ws) -> None:
    await ws.recv()
    await ws.send(json.dumps({"type": "ready", "sample_rate": 16000}))
    await asyncio.sleep(0.4)
    ws.transport.abort()  # no close frame: a dead peer


async def _never_ready(ws) -> None:
    await asyncio.sleep(10)


def _spec(rid: str, url: str) -> RolloutSpec:
    plan = (
        PlanBuilder(16_000)
        .add_silence(0.2)
        .add_turn(tone(300, 0.6, 16_000))
        .add_silence(0.8)
        .build()
    )

    def make(clock, gate):
        t = WebSocketTransport(
            url, RawPcmDialect(16_000), clock, open_gate=gate, ready_timeout_s=1.0, retries=0
        )
        return t

    return RolloutSpec(
        rid, plan, make, {"url": url}, {"item": rid}, SessionConfig(drain_quiet_s=0.4, max_s=10)
    )


async def test_one_bad_rollout_never_takes_down_the_others(tmp_path) -> None:
    good = SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=300, reply_s=0.3))
    good_url = await good.start()
    servers = []
    urls = {}
    for name, handler in (("garbage", _garbage), ("hangup", _hang_up), ("silent", _never_ready)):
        s = await serve(handler, "127.0.0.1", 0)
        servers.append(s)
        urls[name] = f"ws://127.0.0.1:{next(iter(s.sockets)).getsockname()[1]}"
    urls["refused"] = "ws://127.0.0.1:9"  # nothing listens on the discard port
    specs = [_spec("good", good_url)] + [_spec(n, u) for n, u in urls.items()]
    runner = Runner(
        str(tmp_path), RunnerSettings(run_id="r", concurrency=5), clock=MonotonicClock()
    )
    result = await runner.run(specs)
    st = {k: v["status"] for k, v in result["results"].items()}
    assert st == {
        "good": "ok",
        "garbage": "protocol_error",
        "hangup": "transport_error",
        "silent": "transport_error",
        "refused": "transport_error",
    }
    reasons = {k: v["reason"] for k, v in result["results"].items()}
    assert "not JSON" in reasons["garbage"]
    assert "handshake" in reasons["silent"]
    assert "could not connect" in reasons["refused"]
    # the failing rollouts kept what they had recorded
    for name in ("garbage", "hangup"):
        d = tmp_path / "r" / "rollouts" / name
        assert (d / "user.wav").stat().st_size > 44
        assert json.loads((d / "metrics.json").read_text())["status"] != "ok"
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["status_counts"] == {"ok": 1, "protocol_error": 1, "transport_error": 3}
    for s in servers:
        s.close()
    await good.stop()


async def test_resume_redoes_only_failed_rollouts(tmp_path) -> None:
    good = SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=300, reply_s=0.3))
    url = await good.start()
    specs = [_spec("a", url), _spec("b", "ws://127.0.0.1:9")]
    await Runner(str(tmp_path), RunnerSettings(run_id="r", concurrency=2)).run(specs)
    specs = [_spec("a", url), _spec("b", url)]
    lines = []
    await Runner(
        str(tmp_path),
        RunnerSettings(run_id="r", concurrency=2),
        hooks=RunHooks(progress=lines.append),
    ).run(specs)
    assert "a: already done, skipped" in lines
    assert (tmp_path / "r" / "rollouts" / "b.failed-1").is_dir()
    m = json.loads((tmp_path / "r" / "rollouts" / "b" / "metrics.json").read_text())
    assert m["status"] == "ok"
    await good.stop()
