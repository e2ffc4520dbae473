"""The WebSocket transport takes every stamp from the injected clock.

A whole rollout over a real loopback WebSocket (the reference system in this process, on
the same FakeClock) with clock probes: every time in chunks.jsonl, events.jsonl and
metrics.json must be a fake time. The FakeClock starts far from the real monotonic clock,
so one stamp read from `time` (an arrival in `data_received`, a probe reply's t3) shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import NetConfig, SimServer
from rig.transports.websocket import WebSocketTransport

RATE = 16_000
START_NS = 10**17  # ~3 years: no real CLOCK_MONOTONIC reading on this machine comes close
#: duration fields (not instants)
DURATIONS = {"lateness_ns"}


def _times(obj: Any, key: str = "") -> list[tuple[str, int]]:
    """Every integer under a key that names an instant (`*_ns`), anywhere in `obj`."""
    if isinstance(obj, dict):
        return [t for k, v in obj.items() for t in _times(v, str(k))]
    if isinstance(obj, list):
        return [t for v in obj for t in _times(v, key)]
    if isinstance(obj, int) and key.endswith("_ns") and key not in DURATIONS:
        return [(key, obj)]
    return []


async def test_a_fake_clock_rollout_over_a_real_websocket_records_only_fake_times(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START_NS)
    sim = SimServer(
        SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_s=0.5),
        NetConfig(clock_offset_ms=0.0),
        clock=clock,
    )
    url = await sim.start()
    plan = PlanBuilder(RATE).add_silence(0.3).add_turn(tone(300, 0.8, RATE), "t").add_silence(1.5)
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), RATE)
    transport = WebSocketTransport(url, RawPcmDialect(RATE), clock)
    cfg = SessionConfig(start_lead_ms=0, drain_quiet_s=0.5, max_s=20, probe_interval_s=0.1)
    try:
        m = await run_alone(Session("r", transport, plan.build(), rec, clock, cfg))
    finally:
        writer.close()
        await sim.stop()
    end_ns = clock.now_ns()
    assert m["status"] == "ok", m.get("reason")
    (r,) = m["responses"]
    assert r["latency_ms"] is not None
    rows = [json.loads(x) for x in (tmp_path / "r" / "chunks.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (tmp_path / "r" / "events.jsonl").read_text().splitlines()]
    on_disk = json.loads((tmp_path / "r" / "metrics.json").read_text())
    stamps = _times(rows) + _times(events) + _times(on_disk)
    kinds = {k for k, _ in stamps}
    # arrivals, sends, deadlines, playback, probe send/reply and the server's own stamps
    assert {"t_ns", "t_sched_ns", "play_ns", "t0_ns", "t1_server_ns", "user_end_ns"} <= kinds
    assert sum(1 for e in events if e["kind"] == "server.probe_reply") >= 5
    real = [(k, t) for k, t in stamps if not START_NS <= t <= end_ns]
    assert real == [], real[:5]
