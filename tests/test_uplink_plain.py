"""Most uplink frames go to the writer as one tuple (rig.core.uplink `sent_plain`,
rig.recordings `up_frame`): the run directory must be byte for byte what the records
(`UserAudio` + `ChunkRecord`) write, with marks, stalls, barge-ins, a fast prefill and a live
view taking the general path where they occur.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from rig.audio.pcm import level_dbfs
from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.core.director import Drain, Pause, Play, WaitOnset
from rig.core.plan import UserPlan
from rig.core.records import ChunkRecord
from rig.core.uplink import Uplink
from rig.recordings.lines import UP_LINE, chunk_line
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from tests.test_session_tick import NowSystem

RATE = 16_000


class FastSystem(NowSystem):
    faster_than_real_time = True  # the prefill goes out at its speed (the general path)


@pytest.mark.parametrize(
    ("seq", "t_ns", "t_sched", "late", "amp"),
    [(0, 5, 5, 0, 0), (7, 10**12 + 3, 10**12, 3, 8000), (2**31, 2**62, 2**62 - 9, 9, 1)],
)
def test_the_up_line_is_what_chunk_line_writes(seq, t_ns, t_sched, late, amp) -> None:
    pcm = (np.sin(np.arange(320) / 3) * amp).astype(np.int16)
    rec = ChunkRecord("up", seq, 320, RATE, t_ns, t_sched, late, pcm=pcm)
    line = UP_LINE % (seq, pcm.size, RATE, t_ns, t_sched, late, level_dbfs(pcm))
    assert line == chunk_line(rec)
    assert line == json.dumps(rec.to_json(), separators=(",", ":")) + "\n"


def _steps() -> list[Any]:
    q = tone(300, 1.0, RATE).pcm
    return [
        Play(tone(200, 0.4, RATE).pcm, "history", "prefill"),
        Pause(0.3),
        Play(q, "q1", "turn"),
        WaitOnset(0.2),  # barge in 200 ms into the reply
        Play(tone(500, 0.6, RATE).pcm, "stop", "interruption"),
        Pause(0.5),
        Play(q, "q2", "turn"),
        Drain(1.0, 20.0),
    ]


async def _run(tmp_path, name: str, monkeypatch, plain: bool, publish: bool = False):
    if not plain:
        monkeypatch.setattr(Uplink, "sent_plain", lambda self, frame, t: None)
    clock = FakeClock(1_000_000_000)
    system = FastSystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / name), RATE)
    plan = UserPlan(np.zeros(0, np.int16), RATE, [], [], steps=_steps())
    cfg = SessionConfig(start_lead_ms=0, prefill_speed=4.0)
    live: list[Any] = []
    s = Session(name, system, plan, rec, clock, cfg, publish=live.append if publish else None)
    m = await run_alone(s)
    writer.close()
    monkeypatch.undo()
    return m, live


async def test_plain_frames_write_what_the_records_write(tmp_path, monkeypatch) -> None:
    m1, _ = await _run(tmp_path, "plain", monkeypatch, plain=True)
    m2, _ = await _run(tmp_path, "records", monkeypatch, plain=False)
    assert m1["status"] == m2["status"] == "ok"
    assert m1["uplink"] == m2["uplink"]
    for f in ("chunks.jsonl", "events.jsonl", "user.wav", "system.wav"):
        a = (tmp_path / "plain" / f).read_bytes()
        b = (tmp_path / "records" / f).read_bytes()
        assert a == b, f
    lines = (tmp_path / "plain" / "chunks.jsonl").read_text().splitlines()
    up = [json.loads(x) for x in lines if '"dir":"up"' in x]
    assert any("prefill_speed" in c for c in up)  # the fast prefill went the general way
    assert all("level_dbfs" in c for c in up)
    events = (tmp_path / "plain" / "events.jsonl").read_text()
    assert '"barge_in"' in events or '"truncate"' in events or "inject" in events


async def test_a_live_view_sees_what_the_records_show(tmp_path, monkeypatch) -> None:
    m, live = await _run(tmp_path, "live", monkeypatch, plain=True, publish=True)
    m2, live2 = await _run(tmp_path, "live2", monkeypatch, plain=False, publish=True)
    assert m["status"] == m2["status"] == "ok"
    ups = [e for e in live if type(e).__name__ == "LiveChunk" and e.dir == "up"]
    assert len(ups) == m["uplink"]["frames"]
    assert all(e.level_dbfs is not None for e in ups)
    assert ups == [e for e in live2 if type(e).__name__ == "LiveChunk" and e.dir == "up"]
    for f in ("chunks.jsonl", "user.wav"):
        assert (tmp_path / "live" / f).read_bytes() == (tmp_path / "live2" / f).read_bytes()
