"""A slow disk fills the writer's backlog, never the audio loop."""

import asyncio

import pytest

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.dialects.rawpcm import RawPcmDialect
from rig.plan import PlanBuilder
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.transports.websocket import WebSocketTransport

pytestmark = pytest.mark.realtime


async def test_writer_that_sleeps_does_not_make_frames_late(tmp_path) -> None:
    server = SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=300, reply_s=0.5))
    url = await server.start()
    clock = MonotonicClock()
    writer = RecordingWriter(write_delay_s=0.01)  # 10 ms per record: 2x slower than real time
    writer.start()
    plan = (
        PlanBuilder(16_000)
        .add_silence(0.2)
        .add_turn(tone(300, 1.0, 16_000))
        .add_silence(1.0)
        .build()
    )
    rec = writer.rollout(str(tmp_path / "r"), 16_000)
    transport = WebSocketTransport(url, RawPcmDialect(16_000), clock)
    session = Session("r", transport, plan, rec, clock, SessionConfig(drain_quiet_s=0.5))
    m = await session.run()
    backlog_at_end = writer.backlog
    await asyncio.to_thread(writer.close)
    await server.stop()
    assert m["status"] == "ok"
    assert backlog_at_end > 50  # the disk really was behind
    assert m["uplink"]["stalls"] == 0
    assert m["uplink"]["lateness_ms"]["p99"] < 10.0  # generous: shared machine
    user, _ = read_wav(str(tmp_path / "r" / "user.wav"))
    assert len(user) == m["uplink"]["frames"] * 320  # nothing lost once it caught up
