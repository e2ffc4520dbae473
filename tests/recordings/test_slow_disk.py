"""A slow disk fills the writer's backlog, never the audio loop."""

import asyncio

import pytest

from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.sim.thread import SimThread
from rig.transports.websocket import WebSocketTransport

pytestmark = pytest.mark.realtime


async def test_writer_that_sleeps_does_not_make_frames_late(tmp_path) -> None:
    # the reference system on its own loop (a thread), as a system under test would be
    sim = SimThread(SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=300, reply_s=0.5)))
    url = await asyncio.to_thread(sim.start)
    writer = RecordingWriter(write_delay_s=0.01)  # 10 ms per record: 2x slower than real time
    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 1.0, 16_000))
    plan.add_silence(1.0)

    def make(clock, gate):  # type: ignore[no-untyped-def]
        return WebSocketTransport(url, RawPcmDialect(16_000), clock, open_gate=gate)

    spec = RolloutSpec("r", plan.build(), make, {"url": url}, {}, SessionConfig(drain_quiet_s=0.5))
    try:
        result = await Runner(
            str(tmp_path), RunnerSettings(run_id="run", analyze=False), writer=writer
        ).run([spec])
    finally:
        await asyncio.to_thread(sim.stop)
    m = result["results"]["r"]
    assert m["status"] == "ok"
    assert writer.high_water > 50  # the disk really was behind
    assert m["uplink"]["stalls"] == 0
    assert m["uplink"]["lateness_ms"]["p99"] < 10.0  # generous: shared machine
    user, _ = read_wav(str(tmp_path / "run" / "rollouts" / "r" / "user.wav"))
    assert len(user) == m["uplink"]["frames"] * 320  # nothing lost once it caught up
