"""Reference marks and drains in virtual time: the example corpus imported into a suite, each
item played through a whole session against the reference engine on one FakeClock; every mark
must land in events.jsonl exactly where its sample was sent (and on that very sample of the
source file), a fast prefill's marks at its speed; drains wait for a silent system and flag a
reply they cut as censored."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.core.director import Drain, Pause, Play
from rig.core.plan import UserPlan
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.scenarios.fileformat import load_scenario_file
from rig.scenarios.importer import read_points, suite_document, to_toml
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from tests.support.memsystem import MemorySystem

RATE = 16_000
CORPUS = Path(__file__).resolve().parents[1] / "examples" / "corpus"
SAMPLE_NS = 1e9 / RATE


class FastMemorySystem(MemorySystem):
    faster_than_real_time = True


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


async def _run(tmp_path, system, plan, cfg, rid="r", meta=None):
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / rid), RATE)
    m = await run_alone(Session(rid, system, plan, rec, system.clock, cfg, meta=meta))
    writer.close()
    return m, tmp_path / rid


def _imported(tmp_path: Path):
    out = tmp_path / "suite.toml"
    doc = suite_document(
        read_points(str(CORPUS / "points.csv")), str(CORPUS / "points.csv"), str(out)
    )
    out.write_text(to_toml(doc))
    return load_scenario_file(str(out), RATE), doc


def _check_marks_where_played(d: Path, m: dict) -> list[dict]:
    """Every mark event sits at its frame's send time + its offset (within one sample)."""
    ups = {c["seq"]: c for c in _lines(d / "chunks.jsonl") if c["dir"] == "up"}
    marks = [e for e in _lines(d / "events.jsonl") if e["kind"] == "mark"]
    for e in marks:
        c = ups[e["frame_seq"]]
        offset = e["sample"] - e["frame_seq"] * c["n_samples"]
        speed = c.get("prefill_speed", 1.0)
        assert 0 <= offset < c["n_samples"] or offset == c["n_samples"]
        assert abs(e["t_ns"] - (c["t_ns"] + offset * SAMPLE_NS / speed)) <= SAMPLE_NS
        assert e["source"] == "rig" and set(e) >= {"mark", "end_ns", "label", "step"}
    # metrics.json has the same marks, in seconds on the session timeline
    assert [x["mark"] for x in m["marks"]] == [e["mark"] for e in marks]
    for x, e in zip(m["marks"], marks, strict=True):
        assert x["t_s"] == pytest.approx((e["t_ns"] - m["t0_ns"]) / 1e9, abs=1e-9)
        if e["end_ns"] is not None:
            assert x["end_s"] == pytest.approx((e["end_ns"] - m["t0_ns"]) / 1e9, abs=1e-9)
    return marks


async def test_imported_corpus_marks_land_where_their_samples_were_played(tmp_path) -> None:
    items, doc = _imported(tmp_path)
    assert [i.item_id for i in items] == ["c1-pause", "c1-turn", "c2-pause", "c2-turn"]
    for item, spec in zip(items, doc["items"], strict=True):
        clock = FakeClock(1_000_000_000)
        system = MemorySystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
        cfg = SessionConfig(start_lead_ms=0, **item.session)
        m, d = await _run(tmp_path, system, item.plan, cfg, item.item_id, item.meta)
        assert m["status"] == "ok", m
        assert m["tags"] == spec["tags"] and m["censored"] is False
        marks = _check_marks_where_played(d, m)
        turn = spec["steps"][0]
        assert len(marks) == len(turn["marks"])
        # virtual time: never late, so each mark is exactly on the session timeline ...
        for e in marks:
            assert e["t_ns"] == m["t0_ns"] + e["sample"] * 1_000_000_000 // RATE
        # ... and on the very sample of the source file the scenario marked
        user, _ = read_wav(str(d / "user.wav"))
        src, _ = sf.read(CORPUS / turn["file"].split("corpus/")[-1], dtype="int16")
        first = round(turn["start_s"] * RATE)
        play_start = round(0.5 * RATE)  # the turn's default pad_before_s
        for e, spec_mark in zip(marks, sorted(turn["marks"], key=_start), strict=True):
            off = round(_start(spec_mark) * RATE)
            assert e["sample"] == play_start + off
            inside = round(turn["end_s"] * RATE) - first - off  # the slice ends there
            n = min(160, len(user) - e["sample"], inside)
            if n > 0:
                got = user[e["sample"] : e["sample"] + n]
                assert np.array_equal(got, src[first + off : first + off + n, 0])
            if "end_s" in spec_mark:
                span = round(spec_mark["end_s"] * RATE) - off
                assert e["end_ns"] == e["t_ns"] + span * 1_000_000_000 // RATE
        if "reference" in spec:
            assert m["reference"]["text"] == spec["reference"]["text"]
            assert m["reference"]["duration_s"] == pytest.approx(
                spec["reference"]["end_s"] - spec["reference"]["start_s"], abs=1e-6
            )


def _start(mark: dict) -> float:
    return mark.get("t_s", mark.get("start_s"))


async def test_marks_in_a_fast_prefill_land_at_its_speed(tmp_path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(
        f"[[items]]\nid = 'h'\nprefill = '{CORPUS / 'c1.flac'}'\nprefill_channel = 0\n"
        "prefill_start_s = 0.1\nprefill_end_s = 5.3522\nprefill_speed = 4\n"
        "prefill_marks = [{kind = 'pause', start_s = 2.1945, end_s = 3.7426},"
        " {kind = 'eot', t_s = 5.2522}]\n"
        f"steps = [{{type = 'turn', file = '{CORPUS / 'c1.flac'}', channel = 0,"
        " start_s = 7.1878, end_s = 9.4096, marks = [{kind = 'eot', t_s = 2.2218}]},"
        " {type = 'drain', quiet_s = 0.8}]\n"
    )
    (item,) = load_scenario_file(str(p), RATE)
    clock = FakeClock(1_000_000_000)
    system = FastMemorySystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
    m, d = await _run(tmp_path, system, item.plan, SessionConfig(start_lead_ms=0, **item.session))
    assert m["status"] == "ok" and m["uplink"]["prefill"]["speed"] == 4.0
    pause, eot, live = _check_marks_where_played(d, m)
    assert (pause["step"], eot["step"], live["step"]) == (-1, -1, 0)
    t_first = dict(system.sent)[0]  # the history goes out at 4x from the first frame on
    assert pause["t_ns"] == pytest.approx(t_first + 2.1945 * 1e9 / 4, abs=SAMPLE_NS)
    assert pause["end_ns"] - pause["t_ns"] == pytest.approx(
        (3.7426 - 2.1945) * 1e9 / 4, abs=SAMPLE_NS
    )
    # the live part is on the real-time timeline, after the history as if played in real time
    live_sample = item.plan.steps[0].pcm.size + round(0.5 * RATE) + round(2.2218 * RATE)
    assert live["sample"] == live_sample
    assert live["t_ns"] == m["t0_ns"] + live_sample * 1_000_000_000 // RATE


def _drain_plan(drain: Drain) -> UserPlan:
    steps = [Pause(0.2), Play(tone(300, 1.0, RATE).pcm, "q", "turn"), drain]
    return UserPlan(np.zeros(0, np.int16), RATE, [], [], steps=steps)


def _drain_end(d: Path) -> tuple[dict, float]:
    events = _lines(d / "events.jsonl")
    (end,) = [e for e in events if e["kind"] == "drain.end"]
    (start,) = [e for e in events if e["kind"] == "step.start" and e.get("type") == "Drain"] or [
        None
    ]
    turn_end = next(e for e in events if e["kind"] == "turn.end")
    return end, (end["t_ns"] - turn_end["t_ns"]) / 1e9


@pytest.mark.parametrize(("wait_first_s", "ends_after_s"), [(0.0, 1.0), (2.0, 3.0)])
async def test_a_drain_waits_wait_first_s_longer_for_a_silent_system(
    tmp_path, wait_first_s, ends_after_s
) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(policy="never"))
    plan = _drain_plan(Drain(1.0, 20.0, wait_first_s))
    m, d = await _run(tmp_path, system, plan, SessionConfig(start_lead_ms=0))
    end, after_s = _drain_end(d)
    assert after_s == pytest.approx(ends_after_s, abs=0.03)  # one frame
    assert not end.get("timed_out") and m["censored"] is False
    if wait_first_s:
        assert end["spoke"] is False and end["wait_first_s"] == wait_first_s


async def test_a_drain_that_heard_a_reply_ends_on_quiet_not_on_wait_first(tmp_path) -> None:
    clock = FakeClock(0)
    sim = SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_s=1.0)
    system = MemorySystem(clock, sim)
    m, d = await _run(
        tmp_path, system, _drain_plan(Drain(1.0, 20.0, 8.0)), SessionConfig(start_lead_ms=0)
    )
    end, after_s = _drain_end(d)
    assert end["spoke"] is True
    # reply starts ~0.5 s after the turn end, lasts 1 s, then 1 s of quiet: not 9 s
    assert 2.0 < after_s < 3.0 and m["censored"] is False


async def test_a_drain_cut_at_its_cap_while_the_system_talks_is_censored(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_s=8.0))
    m, d = await _run(
        tmp_path, system, _drain_plan(Drain(1.0, 3.0, 2.0)), SessionConfig(start_lead_ms=0)
    )
    end, _ = _drain_end(d)
    assert end["timed_out"] is True and end["censored"] is True
    assert m["status"] == "ok" and m["censored"] is True


async def test_the_rollout_cap_while_the_system_talks_is_censored(tmp_path) -> None:
    clock = FakeClock(0)
    system = MemorySystem(clock, SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_s=8.0))
    m, _ = await _run(
        tmp_path, system, _drain_plan(Drain(1.0, 30.0)), SessionConfig(start_lead_ms=0, max_s=4.0)
    )
    assert m["status"] == "timed_out" and m["censored"] is True
    quiet = MemorySystem(FakeClock(0), SimConfig(policy="never"))
    m2, _ = await _run(
        tmp_path,
        quiet,
        _drain_plan(Drain(30.0, 60.0)),
        SessionConfig(start_lead_ms=0, max_s=4.0),
        "q",
    )
    assert m2["status"] == "timed_out" and m2["censored"] is False
