"""Whole conversations in virtual time: session + reference engine on one FakeClock."""

import json

import numpy as np
import pytest

from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.plan import PlanBuilder
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from tests.support.memsystem import MemorySystem


def _plan(turns: int = 1, gap_s: float = 3.0):
    b = PlanBuilder(16_000).add_silence(0.5)
    for _ in range(turns):
        b.add_turn(tone(300, 1.0, 16_000), "tone").add_silence(gap_s)
    return b.build()


async def _run(tmp_path, system, plan, cfg=None):
    clock = system.clock
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), 16_000)
    s = Session("r", system, plan, rec, clock, cfg or SessionConfig(start_lead_ms=0))
    m = await s.run()
    writer.close()
    return s, m


async def test_latency_equals_ground_truth_in_virtual_time(tmp_path) -> None:
    clock = FakeClock(1_000_000_000)
    sim = SimConfig(latency_ms=350, endpoint_silence_ms=400)
    system = MemorySystem(clock, sim, up_delay_ms=30, down_delay_ms=45)
    s, m = await _run(tmp_path, system, _plan(turns=2))
    assert m["status"] == "ok"
    assert [r["turn"] for r in m["responses"]] == [0, 1]
    truth_end = [t for t in system.truths if t.event == "speech_end"]
    truth_start = [t for t in system.truths if t.event == "reply_start"]
    for r, te, ts in zip(m["responses"], truth_end, truth_start, strict=True):
        expected_ms = (ts.t_ns + 45e6 - (te.data["audio_end_ns"] - 30e6)) / 1e6
        assert r["latency_ms"] == pytest.approx(expected_ms, abs=0.1)
    # virtual time: frames are never late
    assert m["uplink"]["lateness_ms"]["max"] == 0.0 and m["uplink"]["stalls"] == 0


async def test_recording_is_on_one_timeline(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(latency_ms=200, endpoint_silence_ms=300))
    s, m = await _run(tmp_path, system, _plan())
    user, ur = read_wav(str(tmp_path / "r" / "user.wav"))
    sysa, sr = read_wav(str(tmp_path / "r" / "system.wav"))
    assert ur == sr == 16_000
    assert len(user) == m["uplink"]["frames"] * 320
    assert abs(len(sysa) - len(user)) <= 320
    # the system's first loud sample sits at the recorded onset
    first = int(np.flatnonzero(np.abs(sysa) > 328)[0])
    onset = m["responses"][0]["onset_ns"]
    assert abs(first - (onset - m["t0_ns"]) * 16_000 / 1e9) <= 1
    # the user's last loud sample is where the turn ends
    last = int(np.flatnonzero(np.abs(user) > 328)[-1]) + 1
    assert abs(last - (m["responses"][0]["user_end_ns"] - m["t0_ns"]) * 16_000 / 1e9) <= 1
    lines = (tmp_path / "r" / "chunks.jsonl").read_text().splitlines()
    ups = [json.loads(x) for x in lines if '"dir":"up"' in x]
    assert [u["seq"] for u in ups] == list(range(len(ups)))


async def test_burst_reply_is_placed_as_played_not_as_received(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_speed=0))
    s, m = await _run(tmp_path, system, _plan())
    downs = [
        json.loads(x)
        for x in (tmp_path / "r" / "chunks.jsonl").read_text().splitlines()
        if '"dir":"down"' in x
    ]
    assert len({d["t_ns"] for d in downs}) == 1  # all arrived at once
    plays = [d["play_ns"] for d in downs]
    assert all(b - a == 40_000_000 for a, b in zip(plays, plays[1:], strict=False))


async def test_no_audio_status(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(threshold_dbfs=0.0))  # never hears speech
    s, m = await _run(tmp_path, system, _plan())
    assert m["status"] == "no_audio"
    assert m["responses"][0]["latency_ms"] is None and m["responses"][0]["reason"]
    assert (tmp_path / "r" / "system.wav").stat().st_size >= 44


async def test_hang_up_mid_stream_keeps_what_was_recorded(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(), hang_up_after_s=1.0)
    s, m = await _run(tmp_path, system, _plan())
    assert m["status"] == "transport_error" and "hung up" in m["reason"]
    user, _ = read_wav(str(tmp_path / "r" / "user.wav"))
    assert len(user) >= 16_000 * 0.9
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "transport_error"


async def test_hard_cap_times_out(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(reply_s=30.0))
    s, m = await _run(tmp_path, system, _plan(gap_s=0.5), SessionConfig(start_lead_ms=0, max_s=5))
    assert m["status"] == "timed_out"
    assert m["uplink"]["frames"] == 250
