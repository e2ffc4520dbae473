"""Issue #15 row 2: a server that stops reading after its handshake never hangs a rollout.

Real servers on loopback that never read again with a 4 KiB receive buffer (the client's
TCP window fills, its sends block): every network await has a deadline, `max_s` is a
wall-clock cap, the rollout ends `timed_out` naming what was stuck, the recordings stay
whole, and at concurrency 4 the good rollouts beside two stuck ones finish `ok` on time.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.director import Drain, Pause, Play
from rig.core.plan import UserPlan
from rig.dialects import get_dialect
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import CAP_GRACE_S, SessionConfig
from rig.sim.server import SimConfig, SimServer
from rig.transports.websocket import WebSocketTransport
from tests.support.hostile import HostileServer
from tests.support.wait import client_tasks

pytestmark = pytest.mark.realtime

RATE = {"rig": 16_000, "openai": 24_000}


def _spec(
    rid: str,
    url: str,
    dialect: str,
    *,
    max_s: float,
    speech_s: float,
    prefill_s: float = 0.0,
    frame_ms: float = 20.0,
) -> RolloutSpec:
    """A turn of `speech_s`; with `prefill_s`, history audio before it at 100x real time (so
    a stuck peer fills the loopback socket's ~3 MB of send buffer in about a second)."""
    rate = RATE[dialect]
    turn = tone(300, speech_s, rate).pcm
    steps: list[Any] = [Pause(0.2), Play(turn, "turn"), Drain(1.0, max_s)]
    if prefill_s:
        steps.insert(0, Play(tone(200, prefill_s, rate).pcm, "history", role="prefill"))
    plan = UserPlan(np.concatenate([s.pcm for s in steps if isinstance(s, Play)]), rate)
    plan.steps = steps

    def make(clock, gate):  # type: ignore[no-untyped-def]
        opts: dict[str, Any] = {"sample_rate": rate} if dialect == "rig" else {}
        return WebSocketTransport(
            url, get_dialect(dialect, **opts), clock, open_gate=gate, retries=0, ready_timeout_s=3
        )

    cfg = SessionConfig(drain_quiet_s=0.3, max_s=max_s, prefill_speed=100.0, frame_ms=frame_ms)
    return RolloutSpec(rid, plan, make, {"url": url}, {"item": rid}, cfg)


def _check_files(d: Path, m: dict[str, Any]) -> list[dict[str, Any]]:
    """The recordings of a cut-short rollout are whole: every line parses, one chunks row per
    counted chunk, `session.end` carries the status."""
    rows = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
    assert sum(r["dir"] == "up" for r in rows) == m["uplink"]["frames"]
    assert sum(r["dir"] == "down" for r in rows) == m["downlink"]["chunks"]
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
    end = [e for e in events if e["kind"] == "session.end"]
    assert len(end) == 1 and end[0]["status"] == m["status"], end
    assert (d / "user.wav").stat().st_size > 44
    assert json.loads((d / "metrics.json").read_text())["status"] == m["status"]
    return rows


@pytest.mark.parametrize("dialect", ["rig", "openai"])
async def test_a_server_that_stops_reading_times_out_on_the_wall_clock(
    tmp_path: Path, dialect: str
) -> None:
    async with HostileServer("stop_reading", dialect=dialect) as srv:
        runner = Runner(str(tmp_path), RunnerSettings(run_id="r", concurrency=1, analyze=False))
        t = time.monotonic()
        spec = _spec("stuck", srv.url, dialect, max_s=4.0, speech_s=8.0, prefill_s=120.0)
        result = await runner.run([spec])
        elapsed_s = time.monotonic() - t
    m = result["results"]["stuck"]
    assert m["status"] == "timed_out", m.get("reason")
    assert "peer stopped reading" in m["reason"] or "wall-clock cap" in m["reason"], m["reason"]
    # the cap holds: 4 s + the grace + one close deadline at most (was: hung for good)
    assert elapsed_s < 4.0 + CAP_GRACE_S + 2.0, elapsed_s
    rows = _check_files(tmp_path / "r" / "rollouts" / "stuck", m)
    # nothing burst out after the block: sends stay on their deadlines, the rest is counted
    up = [r for r in rows if r["dir"] == "up"]
    assert max(r["lateness_ns"] for r in up) < 2.5e9
    if "peer stopped reading" in m["reason"]:
        assert m["uplink"]["unsent_frames"] >= 50  # a 2 s block: 100 frames due, none sent
    assert client_tasks() == []


async def test_two_stuck_servers_never_hold_up_two_good_ones(tmp_path: Path) -> None:
    good = SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=300, reply_s=0.3))
    good_url = await good.start()
    try:
        async with AsyncExitStack() as stack:
            stuck = [
                await stack.enter_async_context(HostileServer("stop_reading")) for _ in range(2)
            ]
            specs = [
                _spec("good-0", good_url, "rig", max_s=4.0, speech_s=0.6),
                _spec(
                    "stuck-0",
                    stuck[0].url,
                    "rig",
                    max_s=4.0,
                    speech_s=1.0,
                    prefill_s=120.0,
                    frame_ms=100.0,
                ),
                _spec("good-1", good_url, "rig", max_s=4.0, speech_s=0.6),
                _spec(
                    "stuck-1",
                    stuck[1].url,
                    "rig",
                    max_s=4.0,
                    speech_s=1.0,
                    prefill_s=120.0,
                    frame_ms=100.0,
                ),
            ]
            runner = Runner(
                str(tmp_path),
                RunnerSettings(run_id="r", concurrency=4, analyze=False),
                clock=MonotonicClock(),
            )
            t = time.monotonic()
            result = await runner.run(specs)
            elapsed_s = time.monotonic() - t
    finally:
        await good.stop()
    st = {k: v["status"] for k, v in result["results"].items()}
    assert st == {"good-0": "ok", "good-1": "ok", "stuck-0": "timed_out", "stuck-1": "timed_out"}
    assert elapsed_s < 4.0 + CAP_GRACE_S + 2.0, elapsed_s
    for rid, m in result["results"].items():
        _check_files(tmp_path / "r" / "rollouts" / rid, m)
        if rid.startswith("good"):
            # on time: never held up by the stuck ones (their 100x prefill bursts, in 100 ms
            # frames to keep the loop's share small, cost a few ms; a stuck peer holding the
            # fleet would cost seconds)
            assert m["uplink"]["lateness_ms"]["max"] < 100, m["uplink"]
            assert m["responses"] and m["responses"][0]["latency_ms"] is not None


async def test_the_cap_holds_outside_the_paced_loop_a_silent_connect(tmp_path: Path) -> None:
    """A listener that accepts TCP and never answers the WebSocket upgrade: the connect's own
    timeout (10 s) is longer than `max_s`; the wall-clock cap ends the rollout first."""
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    spec = _spec("silent", f"ws://127.0.0.1:{port}", "rig", max_s=2.0, speech_s=1.0)
    t = time.monotonic()
    try:
        result = await Runner(str(tmp_path), RunnerSettings(run_id="r", analyze=False)).run([spec])
    finally:
        silent.close()
    elapsed_s = time.monotonic() - t
    m = result["results"]["silent"]
    assert m["status"] == "timed_out", m
    assert "wall-clock cap of 2 s" in m["reason"] and "connecting" in m["reason"], m["reason"]
    assert elapsed_s < 2.0 + CAP_GRACE_S + 1.0, elapsed_s
    events = (tmp_path / "r" / "rollouts" / "silent" / "events.jsonl").read_text()
    assert '"session.end"' in events
