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
from rig.conditions.hook import ConditionPlan, PlayConditions
from rig.core.director import Drain, Pause, Play, WaitOnset
from rig.core.plan import UserPlan
from rig.core.records import ChunkRecord
from rig.core.uplink import Uplink
from rig.recordings.levels import SILENCE
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


def _conditions() -> ConditionPlan:
    """Every play 6 dB down: frames the hook changes inside every play (no noise bed: the
    reference system's adaptive gate did not endpoint this short script over one)."""
    plays = [
        PlayConditions((step.pcm // 2).astype(np.int16), None, 0, 0)
        for step in _steps()
        if isinstance(step, Play)
    ]
    return ConditionPlan(RATE, plays)


async def _run(
    tmp_path, name: str, monkeypatch, plain: bool, publish: Any = False, conditions=False
):
    served = []  # frames the tick sent by their parts (Uplink.plain_pcm), no Frame made
    if plain:
        real = Uplink.plain_pcm

        def counted(self):
            pcm = real(self)
            if pcm is not None:
                served.append(self.pacer.next_seq)
            return pcm

        monkeypatch.setattr(Uplink, "plain_pcm", counted)
    else:
        monkeypatch.setattr(Uplink, "sent_plain", lambda self, frame, t: None)
        monkeypatch.setattr(Uplink, "plain_pcm", lambda self: None)
    clock = FakeClock(1_000_000_000)
    system = FastSystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / name), RATE)
    plan = UserPlan(np.zeros(0, np.int16), RATE, [], [], steps=_steps())
    if conditions:
        plan.conditions = _conditions()
    cfg = SessionConfig(start_lead_ms=0, prefill_speed=4.0)
    live: list[Any] = []
    pub = live.append if publish is True else (publish or None)
    s = Session(name, system, plan, rec, clock, cfg, publish=pub)
    m = await run_alone(s)
    writer.close()
    monkeypatch.undo()
    if plain:  # most frames inside the Plays (2.4 s: 120 frames) took the tick's plain path
        assert len(served) >= 100, (len(served), m["uplink"]["frames"])
    # plain frames' levels came from their plays' tables (rig.recordings.levels), one per
    # play; a hook changes the frames, and then each is measured
    tables = writer.frame_levels.measured
    assert (tables > 0) if plain and not conditions else tables == 0, tables
    # and the silent frames between the plays, from the table of silence
    silence = [ref() is SILENCE for ref, _ in writer.frame_levels._tables.values()]
    assert any(silence) if plain and not conditions else not any(silence)
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


async def test_plain_frames_under_conditions_write_what_the_records_write(
    tmp_path, monkeypatch
) -> None:
    """Frame hooks (conditions) on the tick's plain path: the frame sent and the frame
    before the hooks (user_clean.wav) as the general path writes them."""
    m1, _ = await _run(tmp_path, "plain", monkeypatch, plain=True, conditions=True)
    m2, _ = await _run(tmp_path, "records", monkeypatch, plain=False, conditions=True)
    assert m1["status"] == m2["status"] == "ok"
    assert m1["uplink"] == m2["uplink"]
    for f in ("chunks.jsonl", "events.jsonl", "user.wav", "user_clean.wav", "system.wav"):
        a = (tmp_path / "plain" / f).read_bytes()
        b = (tmp_path / "records" / f).read_bytes()
        assert a == b, f
    user = (tmp_path / "plain" / "user.wav").read_bytes()
    assert user != (tmp_path / "plain" / "user_clean.wav").read_bytes()  # the hook did act


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


async def test_nobody_listening_no_chunk_views_until_someone_subscribes(
    tmp_path, monkeypatch
) -> None:
    """A headless run without MQTT has no subscriber on its bus: the sessions then build no
    chunk view per frame (no level measured on the loop for it), publish everything else,
    and record the same bytes; once someone subscribes, every frame is seen again."""
    import rig.recordings.sink as sink_mod
    from rig.telemetry.bus import EventBus
    from rig.telemetry.session_bridge import session_publisher

    bus = EventBus()
    kinds: list[str] = []
    real = bus.publish
    monkeypatch.setattr(bus, "publish", lambda e: (kinds.append(e.kind), real(e))[1])
    levels: list[int] = []
    monkeypatch.setattr(sink_mod, "level_dbfs", lambda pcm: levels.append(1) or level_dbfs(pcm))
    factory = session_publisher(bus, "run", FakeClock())
    quiet = factory("quiet")
    assert quiet.listening() is False  # type: ignore[attr-defined]
    m, _ = await _run(tmp_path, "quiet", monkeypatch, plain=True, publish=quiet)
    assert m["status"] == "ok"
    assert "status" in kinds and "chunk" not in kinds and not levels
    m0, _ = await _run(tmp_path, "none", monkeypatch, plain=True)
    for f in ("chunks.jsonl", "events.jsonl", "user.wav", "system.wav"):
        assert (tmp_path / "quiet" / f).read_bytes() == (tmp_path / "none" / f).read_bytes()

    sub = bus.subscribe(maxlen=100_000)
    monkeypatch.setattr(bus, "publish", lambda e: (kinds.append(e.kind), real(e))[1])
    kinds.clear()
    watched = factory("watched")
    assert watched.listening() is True  # type: ignore[attr-defined]
    m2, _ = await _run(tmp_path, "watched", monkeypatch, plain=True, publish=watched)
    ups = [e for e in sub.drain() if e.kind == "chunk" and e.data["dir"] == "up"]
    assert len(ups) == m2["uplink"]["frames"] > 0
