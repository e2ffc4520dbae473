"""Grok-style peers (a server clock on pings only) split with the one-way fit + round trips
(rig.analysis.downfit, `envelope-down+rtt`), against the impairment relay's applied delays."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.core.units import NS_PER_MS
from rig.net.impair import parse_impair
from rig.relay.process import TcpRelay
from tests.fakes.harness import tone_plan
from tests.fakes.openai_server import RATE, FakeRealtimeServer


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.realtime
async def test_grok_split_legs_inside_their_bars_on_an_asymmetric_path(tmp_path: Path) -> None:
    from rig.dialects import get_dialect
    from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
    from rig.session import SessionConfig
    from rig.transports.websocket import WebSocketTransport

    async with FakeRealtimeServer("grok", reply_s=0.5, ping_interval_s=0.1) as srv:
        port = int(srv.url.split(":")[2].split("/")[0])
        relay = TcpRelay("127.0.0.1", port, parse_impair("up:delay=10ms,down:delay=50ms"))
        addr = relay.start(str(tmp_path / "impair.jsonl"))

        def make(clock: Any, gate: asyncio.Semaphore) -> Any:
            return WebSocketTransport(
                srv.url, get_dialect("grok"), clock, open_gate=gate, connect_via=addr
            )

        plan = tone_plan(RATE, turns=2, turn_s=0.6, gap_s=1.8)
        cfg = SessionConfig(drain_quiet_s=0.8, max_s=30, path_interval_s=0.25)
        runner = Runner(str(tmp_path), RunnerSettings(run_id="run"))
        try:
            await runner.run([RolloutSpec("g", plan, make, {}, {}, cfg)])
        finally:
            await asyncio.to_thread(relay.stop)
    m = runner.results["g"]
    assert m["status"] == "ok", m
    assert m["clock_fit"]["method"] == "envelope-down", m["clock_fit"]
    rows = _rows(tmp_path / "impair.jsonl")
    up_true, down_true = (
        float(np.median([r["t_out_ns"] - r["t_in_ns"] for r in rows if r["dir"] == d])) / NS_PER_MS
        for d in ("up", "down")
    )
    answered = [r for r in m["responses"] if r.get("latency_ms") is not None]
    assert len(answered) == 2
    for r in answered:
        assert r["clock_method"] == "envelope-down+rtt", r
        # truth: the legs as the relay applied them; the model what remains of arrival - P0
        model_true = (r["onset_arrival_ns"] - r["user_end_ns"]) / NS_PER_MS - up_true - down_true
        assert abs(r["uplink_ms"] - up_true) <= r["uplink_err_ms"], (r, up_true)
        assert abs(r["downlink_ms"] - down_true) <= r["downlink_err_ms"], (r, down_true)
        assert abs(r["model_ms"] - model_true) <= r["model_err_ms"], (r, model_true)
        # the legs' bars come from the minimum round trip and the stamps near each moment
        assert r["rtt_min_ms"] <= r["rtt_ms"] and r["downlink_err_ms"] >= r["rtt_min_ms"] / 2
        parts = sum(r[k] for k in ("uplink_ms", "model_ms", "downlink_ms", "queue_ms"))
        assert parts == pytest.approx(r["latency_ms"], abs=0.01)
