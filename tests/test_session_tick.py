"""The uplink's tick path (rig.sessiontick) sends what the awaited path sends, frame for frame.

Same script, same virtual clock, same system: once with frames from the clock's tick, once
with the send loop awaiting every deadline (`tick=False`). The records must be identical:
every uplink chunk's deadline, send time and lateness, the events and their times, the
metrics. An interruption (barge-in announced after the frame), turn markers (control
requests around the audio) and a transport that sometimes cannot take a frame now all make
the tick hand frames back to the loop.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from rig.audio.pcm import Pcm16
from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.core.director import Drain, Pause, Play, WaitOnset
from rig.core.plan import UserPlan
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from tests.support.memsystem import MemorySystem

RATE = 16_000


class NowSystem(MemorySystem):
    """MemorySystem with the non-waiting send; `refuse_every` > 0 refuses every Nth frame."""

    sends_now = True

    def __init__(self, *a: Any, refuse_every: int = 0, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.refuse_every = refuse_every
        self.events: list[tuple[str, int]] = []

    def send_audio_now(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int | None:
        if self.refuse_every and seq % self.refuse_every == 0:
            return None
        t = self.clock.now_ns()
        self.sent.append((seq, t))
        self.truths.extend(self.engine.on_audio(pcm.copy(), t + self.up_ns))
        self._wake.set()
        return t

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, self.clock.now_ns()))


def _steps() -> list[Any]:
    q = tone(300, 1.0, RATE).pcm
    return [
        Pause(0.3),
        Play(q, "q1", "turn"),
        WaitOnset(0.2),  # barge in 200 ms into the reply
        Play(tone(500, 0.6, RATE).pcm, "stop", "interruption"),
        Pause(0.5),
        Play(q, "q2", "turn"),
        Drain(1.0, 20.0),
    ]


async def _run(tmp_path, name: str, tick: bool, **kw: Any):
    clock = FakeClock(1_000_000_000)
    system = NowSystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400), **kw)
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / name), RATE)
    plan = UserPlan(np.zeros(0, np.int16), RATE, [], [], steps=_steps())
    cfg = SessionConfig(start_lead_ms=0, tick=tick)
    s = Session(name, system, plan, rec, clock, cfg)
    m = await run_alone(s)
    writer.close()
    return s, m, system


def _lines(path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("refuse_every", [0, 7])
async def test_tick_and_awaited_paths_record_the_same_rollout(tmp_path, refuse_every) -> None:
    s_tick, m_tick, sys_tick = await _run(tmp_path, "tick", True, refuse_every=refuse_every)
    s_wait, m_wait, sys_wait = await _run(tmp_path, "wait", False, refuse_every=refuse_every)
    assert m_tick["status"] == m_wait["status"] == "ok"
    frames = m_tick["uplink"]["frames"]
    assert frames == m_wait["uplink"]["frames"] > 150
    ticked = m_tick["uplink"]["tick_frames"]
    assert m_wait["uplink"]["tick_frames"] == 0
    # every frame from the tick except those handed back (markers, barge-ins, refusals)
    assert frames * (0.85 if refuse_every else 0.97) < ticked < frames
    assert sys_tick.sent == sys_wait.sent  # same frames at the same instants
    assert sys_tick.events == sys_wait.events  # the same control messages, same times
    for name in ("chunks.jsonl", "events.jsonl"):
        a, b = _lines(tmp_path / "tick" / name), _lines(tmp_path / "wait" / name)
        assert [x for x in a if x.get("kind") != "session.start"] == [
            x for x in b if x.get("kind") != "session.start"
        ], name
    kinds = {e["kind"] for e in _lines(tmp_path / "tick" / "events.jsonl")}
    assert {"control.truncate", "control.turn_start", "control.turn_end"} <= kinds, kinds
    for key in ("responses", "status", "reason"):
        assert m_tick[key] == m_wait[key], key
    up_t, up_w = dict(m_tick["uplink"]), dict(m_wait["uplink"])
    up_t.pop("tick_frames"), up_w.pop("tick_frames")
    assert up_t == up_w
    assert (tmp_path / "tick" / "user.wav").read_bytes() == (
        tmp_path / "wait" / "user.wav"
    ).read_bytes()


async def test_a_failed_send_from_the_tick_ends_the_rollout_with_its_reason(tmp_path) -> None:
    class Breaks(NowSystem):
        def send_audio_now(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int | None:
            if seq == 60:
                from rig.errors import TransportError

                raise TransportError("peer hung up")
            return super().send_audio_now(pcm, seq, t_sched_ns)

    clock = FakeClock(0)
    system = Breaks(clock, SimConfig())
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), RATE)
    plan = UserPlan(np.zeros(0, np.int16), RATE, [], [], steps=_steps())
    m = await run_alone(Session("r", system, plan, rec, clock, SessionConfig(start_lead_ms=0)))
    writer.close()
    assert m["status"] == "transport_error" and "hung up" in m["reason"]
    assert m["uplink"]["frames"] == 60  # everything before the failed one was kept
