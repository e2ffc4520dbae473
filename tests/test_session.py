"""Whole conversations in virtual time: session + reference engine on one FakeClock."""

import json

import numpy as np
import pytest

from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.core.director import Drain, Pause, Play
from rig.core.plan import PlanBuilder, UserPlan
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
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
    m = await run_alone(s)
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


class FastMemorySystem(MemorySystem):
    faster_than_real_time = True  # like a WebSocket: audio may go out faster than it plays


def _prefill_plan(prefill_s: float = 3.0) -> UserPlan:
    quiet = tone(200, prefill_s, 16_000, level_dbfs=-70).pcm  # history, under the VAD
    steps = [
        Play(quiet, "history", "prefill", barge_in=False),
        Pause(0.5),
        Play(tone(300, 1.0, 16_000).pcm, "q", "turn"),
        Drain(1.5, 20.0),
    ]
    return UserPlan(np.zeros(0, np.int16), 16_000, [], [], steps=steps)


async def test_fast_prefill_goes_out_at_speed_and_keeps_one_timeline(tmp_path) -> None:
    clock = FakeClock(1_000_000_000)
    sim = SimConfig(latency_ms=350, endpoint_silence_ms=400)
    system = FastMemorySystem(clock, sim, up_delay_ms=30, down_delay_ms=45)
    s, m = await _run(
        tmp_path, system, _prefill_plan(), SessionConfig(start_lead_ms=0, prefill_speed=4.0)
    )
    assert m["status"] == "ok"
    assert m["uplink"]["prefill"] == {
        "samples": 48_000, "requested_speed": 4.0, "speed": 4.0, "fast_frames": 150
    }  # fmt: skip
    t = dict(system.sent)
    assert t[1] - t[0] == 5_000_000 and t[149] - t[148] == 5_000_000  # 20 ms frames every 5 ms
    assert t[150] - t[149] == 5_000_000 and t[151] - t[150] == 20_000_000  # then real time
    assert t[150] - t[0] == 750_000_000  # 3 s of history in 0.75 s
    # the timeline origin lies where the history would have started in real time
    assert m["t0_ns"] == t[0] - 2_250_000_000
    assert m["uplink"]["lateness_ms"]["max"] == 0.0 and m["uplink"]["stalls"] == 0
    # the live turn is still timed against the truth, on the same timeline as the recordings
    (r,) = m["responses"]
    te = next(x for x in system.truths if x.event == "speech_end")
    ts = next(x for x in system.truths if x.event == "reply_start")
    assert r["latency_ms"] == pytest.approx(
        (ts.t_ns + 45e6 - (te.data["audio_end_ns"] - 30e6)) / 1e6, abs=0.1
    )
    user, _ = read_wav(str(tmp_path / "r" / "user.wav"))
    last = int(np.flatnonzero(np.abs(user) > 328)[-1]) + 1
    assert abs(last - (r["user_end_ns"] - m["t0_ns"]) * 16_000 / 1e9) <= 1
    ups = [json.loads(x) for x in (tmp_path / "r" / "chunks.jsonl").read_text().splitlines()]
    fast = [u for u in ups if u["dir"] == "up" and u.get("prefill_speed") == 4.0]
    assert len(fast) == 150
    events = [json.loads(x) for x in (tmp_path / "r" / "events.jsonl").read_text().splitlines()]
    (start,) = [e for e in events if e["kind"] == "session.start"]
    assert start["connect_ms"] == 0.0 and start["prefill"]["fast_frames"] == 150  # not -2250


async def test_prefill_plays_in_real_time_where_the_transport_cannot_go_faster(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(latency_ms=200, endpoint_silence_ms=300))
    s, m = await _run(
        tmp_path, system, _prefill_plan(1.0), SessionConfig(start_lead_ms=0, prefill_speed=4.0)
    )
    p = m["uplink"]["prefill"]
    assert p["speed"] == 1.0 and p["fast_frames"] == 0 and "real time" in p["reason"]
    t = dict(system.sent)
    assert t[1] - t[0] == 20_000_000


class _SwallowsCancel(MemorySystem):
    """A path sampler that loses the cancel it gets (as asyncio.wait_for on 3.11 does when its
    future completes at the same moment): the session must still close."""

    samples_path = True

    async def sample_path(self):
        import asyncio

        try:
            await self.clock.sleep_until(self.clock.now_ns() + 1_000_000)
        except asyncio.CancelledError:
            pass
        return []


async def test_a_path_sampler_that_swallows_its_cancel_does_not_hang_the_close(tmp_path) -> None:
    import asyncio

    clock = FakeClock(0)
    system = _SwallowsCancel(clock, SimConfig(latency_ms=200, endpoint_silence_ms=300))
    cfg = SessionConfig(start_lead_ms=0, path_interval_s=0.001)
    s, m = await asyncio.wait_for(_run(tmp_path, system, _plan(), cfg), 30)
    assert m["status"] == "ok"
