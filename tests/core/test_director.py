"""Turn-taking policies on FakeClock: releases and injections on the playback clock."""

import json

import numpy as np
import pytest

from rig.audio.source import tone
from rig.clock.base import FakeClock
from rig.core.director import Director, Drain, Observation, Pause, Play, WaitOnset, WaitQuiet
from rig.core.plan import UserPlan
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from tests.support.memsystem import MemorySystem

RATE = 16_000


def obs(t_ns, busy=False, quiet=None, onset=None, n=0):
    return Observation(t_ns, busy, quiet, onset, n)


def test_play_and_pause_fill_frames_sample_exactly() -> None:
    t = tone(300, 0.05, RATE).pcm  # 800 samples = 2.5 frames
    d = Director([Pause(0.01), Play(t, "a"), Pause(0.01)], RATE, 320, 0)
    frames = []
    while (f := d.next_frame(obs(d.timeline.time_of(d.sample)))) is not None:
        frames.append(f)
    audio = np.concatenate([f[0] for f in frames])
    assert np.array_equal(audio[160:960], t)
    assert not audio[:160].any() and not audio[960:1120].any()
    kinds = [(m.kind, i * 320 + m.offset) for i, f in enumerate(frames) for m in f[1]]
    assert ("turn.start", 160 + int(np.flatnonzero(np.abs(t) > 328)[0])) in kinds


def test_a_frame_is_silent_exactly_when_no_play_gave_it_samples() -> None:
    """`Director.silent` (the writer then skips measuring the frame's level)."""
    t = tone(300, 0.05, RATE).pcm  # 800 samples = 2.5 frames
    d = Director([Pause(0.03), Play(t, "a"), Drain(0.2, 0.2)], RATE, 320, 0)
    d.fast_play = False  # every frame through the general path, which sets the flag
    silent = []
    while (f := d.next_frame(obs(d.timeline.time_of(d.sample)))) is not None:
        silent.append(d.silent)
        assert d.silent == (not f[0].any()), len(silent)
    # 480 samples of pause: one silent frame, then a frame with the tone's start in it
    assert silent[:5] == [True, False, False, False, True], silent
    assert all(silent[5:]) and len(silent) > 8


def test_wait_onset_starts_the_injection_at_the_exact_sample() -> None:
    inj = np.full(320, 5000, np.int16)
    d = Director([WaitOnset(0.5, timeout_s=10), Play(inj, "x", "interruption")], RATE, 320, 0)
    out = []
    for k in range(200):
        t = k * 20_000_000
        # a reply was heard from 1.003 s (playback clock), known once it has arrived
        o = obs(
            t,
            busy=t >= 1_003_000_000,
            onset=1_003_000_000 if t >= 1_003_000_000 else None,
            n=1 if t >= 1_003_000_000 else 0,
        )
        f = d.next_frame(o)
        if f is None:
            break
        out.append(f)
    audio = np.concatenate([f[0] for f in out])
    first = int(np.flatnonzero(audio)[0])
    assert first == round(1.503 * RATE)  # 0.5 s into the reply, to the sample
    inject_marks = [m for f in out for m in f[1] if m.kind == "inject"]
    assert inject_marks and inject_marks[0].data["injection"] == "interruption"


def test_wait_quiet_needs_a_reply_then_quiet_and_times_out_otherwise() -> None:
    d = Director([WaitQuiet(1.0, timeout_s=3.0)], RATE, 320, 0)
    k, marks = 0, []
    while (f := d.next_frame(obs(k * 20_000_000))) is not None:  # the system never speaks
        marks += [(k, m) for m in f[1]]
        k += 1
    rel = [(k, m) for k, m in marks if m.kind == "release"]
    assert [(k, m.offset, m.data.get("timed_out")) for k, m in rel] == [(150, 0, True)]  # at 3 s
    d = Director([WaitQuiet(1.0, timeout_s=30.0)], RATE, 320, 0)
    k, marks = 0, []
    while True:
        t = k * 20_000_000
        speaking = 500_000_000 <= t < 2_000_000_000
        f = d.next_frame(
            obs(
                t,
                busy=speaking,
                quiet=None if t < 2e9 else 2_000_000_000,
                onset=500_000_000 if t >= 5e8 else None,
                n=int(t >= 5e8),
            )
        )
        if f is None:
            break
        marks += [(k, m) for m in f[1]]
        k += 1
    rel = [(k, m) for k, m in marks if m.kind == "release"]
    assert len(rel) == 1 and rel[0][0] == 150  # quiet from 2.0 s, released at 3.0 s
    assert rel[0][1].data["rule"] == "quiet" and not rel[0][1].data.get("timed_out")


async def _session(tmp_path, steps, sim: SimConfig, down_delay_ms=0.0, cap_s=30.0):
    clock = FakeClock(0)
    system = MemorySystem(clock, sim, down_delay_ms=down_delay_ms)
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), RATE)
    plan = UserPlan(np.zeros(0, np.int16), RATE, steps=steps)
    s = Session("r", system, plan, rec, clock, SessionConfig(start_lead_ms=0, max_s=cap_s))
    m = await run_alone(s)
    writer.close()
    events = [json.loads(x) for x in (tmp_path / "r" / "events.jsonl").read_text().splitlines()]
    return s, m, events, system


@pytest.mark.parametrize("speed", [1.0, 0.0])
async def test_injection_lands_n_seconds_into_the_reply_as_played(tmp_path, speed) -> None:
    sim = SimConfig(
        latency_ms=300, endpoint_silence_ms=400, reply_s=3.0, reply_speed=speed, barge_in=False
    )
    steps = [
        Pause(0.3),
        Play(tone(300, 1.0, RATE).pcm, "q"),
        WaitOnset(1.2, timeout_s=10),
        Play(tone(500, 0.5, RATE).pcm, "stop", "interruption"),
        Drain(1.0, 10),
    ]
    s, m, events, system = await _session(tmp_path, steps, sim, down_delay_ms=80)
    onset = m["responses"][0]["onset_ns"]
    inject = next(e for e in events if e["kind"] == "inject")
    # the interruption's audio starts 1.2 s after the reply onset *as played*, to the sample
    assert inject["t_ns"] - onset == pytest.approx(1.2e9, abs=1e9 / RATE)
    if speed == 0:
        # the whole reply arrived at once: as received, it would have been 1.2 s after arrival
        downs = [
            json.loads(x)
            for x in (tmp_path / "r" / "chunks.jsonl").read_text().splitlines()
            if '"dir":"down"' in x
        ]
        first_reply = [d for d in downs if d["t_ns"] < inject["t_ns"]]
        assert len(first_reply) == 75 and len({d["t_ns"] for d in first_reply}) == 1
    trunc = [e for e in events if e["kind"] == "playback.truncate"]
    assert trunc and trunc[0]["dropped_samples"] > 0  # the listener's queue was cut at barge-in


async def test_release_next_turn_after_quiet_on_the_playback_clock(tmp_path) -> None:
    sim = SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_s=1.0, reply_speed=0.0)
    q = tone(300, 0.8, RATE).pcm
    steps = [Pause(0.2), Play(q, "one"), WaitQuiet(0.7, timeout_s=20), Play(q, "two"), Drain(1.0)]
    s, m, events, system = await _session(tmp_path, steps, sim, down_delay_ms=50)
    assert m["status"] == "ok"
    r0, r1 = m["responses"]
    reply_end_play = r0["onset_ns"] + 1_000_000_000  # 1 s reply, played from its onset
    release = next(e for e in events if e["kind"] == "release")
    assert release["t_ns"] == pytest.approx(reply_end_play + 0.7e9, abs=21e6)  # frame resolution
    assert r1["latency_ms"] is not None


def test_speech_bounds_are_measured_before_the_stream_and_once_per_array(monkeypatch) -> None:
    """The director measures its plays' bounds as it is made, not at each play's start on
    the tick, and repeats sharing a plan's arrays share the measurement."""
    import rig.core.plan as plan

    calls = []
    real = plan.speech_bounds

    def counted(pcm, *a, **k):
        calls.append(id(pcm))
        return real(pcm, *a, **k)

    monkeypatch.setattr(plan, "speech_bounds", counted)
    a = np.concatenate([np.zeros(800, np.int16), tone(300, 0.05, RATE).pcm])
    b = tone(500, 0.03, RATE).pcm
    steps = [Play(a, "a"), Pause(0.01), Play(b, "b", "interruption"), Play(a, "a again")]
    first = Director(steps, RATE, 320, 0)
    assert sorted(calls) == sorted([id(a), id(b)])  # a once, though it plays twice
    Director(list(steps), RATE, 320, 0)  # a repeat of the same plan
    assert len(calls) == 2
    calls.clear()
    frames = []
    while (f := first.next_frame(obs(first.timeline.time_of(first.sample)))) is not None:
        frames.append(f)
    assert calls == []  # nothing measured while streaming
    starts = [i * 320 + m.offset for i, f in enumerate(frames) for m in f[1]
              if m.kind == "turn.start"]  # fmt: skip
    assert starts[0] == 800 + int(np.flatnonzero(np.abs(a[800:]) > 328)[0])
    assert [t.speech_start_sample for t in first.turns] == [
        800 + starts[0] - 800,
        len(a) + 160 + real(b, RATE)[0],
        len(a) + 160 + len(b) + real(a, RATE)[0],
    ]


def test_speech_bounds_once_tells_a_new_array_from_a_dead_one() -> None:
    """An id reused by a new array is measured anew (the weak reference is dead)."""
    from rig.core.plan import speech_bounds, speech_bounds_once

    for k in range(50):  # ids are reused quickly by arrays of one size
        pcm = np.zeros(1600, np.int16)
        pcm[160 * (k % 9) :] = 4000
        assert speech_bounds_once(pcm, RATE) == speech_bounds(pcm, RATE)
        del pcm
