"""The uplink with plain calls: frames, control requests, the records of what was sent."""

from __future__ import annotations

import numpy as np

from rig.core.director import Observation, Pause, Play
from rig.core.events import ControlRequest
from rig.core.pacer import Pacer, PacerConfig
from rig.core.records import ChunkRecord, EventRecord, UserAudio
from rig.core.uplink import Uplink, plan_prefill

RATE = 16_000
N = 320  # 20 ms
MS = 1_000_000
T0 = 5_000 * MS


def quiet(t_ns: int) -> Observation:
    return Observation(t_ns, False, None, None, 0)


def speech(n: int) -> np.ndarray:
    return np.full(n, 8000, np.int16)


def run(
    uplink: Uplink, late_ns: int = 0
) -> list[tuple[object, list[object], list[tuple[int, int]]]]:
    """Send every frame `late_ns` after its deadline; what each frame produced."""
    out = []
    while (frame := uplink.next_frame(quiet(uplink.pacer.next_deadline_ns))) is not None:
        records, barge_ins = uplink.sent(frame, frame.deadline_ns + late_ns)
        out.append((frame, records, barge_ins))
    return out


def test_turn_markers_go_before_and_after_the_audio_they_mark() -> None:
    # 100 ms of silence, then a turn: 10 ms quiet lead-in + 200 ms speech + 10 ms quiet
    turn = np.concatenate([np.zeros(160, np.int16), speech(3200), np.zeros(160, np.int16)])
    up = Uplink([Pause(0.1), Play(turn, "t")], Pacer(PacerConfig(RATE, N), T0))
    frames = run(up)
    starts = [(f.seq, f.before) for f, _, _ in frames if f.before]
    ends = [(f.seq, f.after) for f, _, _ in frames if f.after]
    assert starts == [(5, (ControlRequest("turn_start", {"turn": 0}),))]
    assert ends == [(15, (ControlRequest("turn_end", {"turn": 0}),))]
    # the barge-in that starting the turn asks for: at its first speech sample, on the clock
    barge = [b for _, _, bs in frames for b in bs]
    assert barge == [(0, T0 + 110 * MS)]
    # marks are events at their sample's send time
    events = [r for _, rs, _ in frames for r in rs if isinstance(r, EventRecord)]
    start = next(e for e in events if e.kind == "turn.start")
    assert start.t_ns == T0 + 110 * MS and start.data["sample"] == 1760


def test_what_was_sent_is_recorded_with_its_deadline_lateness_and_stalls() -> None:
    up = Uplink([Pause(0.06)], Pacer(PacerConfig(RATE, N), T0))
    frames = run(up, late_ns=25 * MS)  # later than a frame: every one is a stall
    assert len(frames) == 3
    _, records, _ = frames[1]
    audio, row, stall = records[:3]
    assert isinstance(audio, UserAudio) and audio.pcm.size == N
    assert isinstance(row, ChunkRecord) and row.dir == "up" and row.seq == 1
    assert row.t_sched_ns == T0 + 20 * MS and row.t_ns == T0 + 45 * MS
    assert row.lateness_ns == 25 * MS
    assert stall == EventRecord("stall", T0 + 45 * MS, {"seq": 1, "lateness_ns": 25 * MS})
    assert up.send_ns == [T0 + 25 * MS, T0 + 45 * MS, T0 + 65 * MS]
    assert up.lateness_ns == [25 * MS] * 3 and up.pacer.stalls == 3
    assert up.user_track_ns == 60 * MS


def test_fast_prefill_frames_say_so() -> None:
    steps = [Play(speech(4 * N), "history", "prefill"), Pause(0.04)]
    prefill = plan_prefill(steps, N, 4.0, transport_fast=True)
    assert (prefill.fast_frames, prefill.speed) == (4, 4.0)
    cfg = PacerConfig(RATE, N)
    up = Uplink(steps, Pacer(cfg, T0, fast_frames=prefill.fast_frames, speed=prefill.speed))
    rows = [r for _, rs, _ in run(up) for r in rs if isinstance(r, ChunkRecord)]
    assert [(r.extra or {}).get("prefill_speed") for r in rows] == [4.0] * 4 + [None] * 2
    assert [r.t_sched_ns - rows[0].t_sched_ns for r in rows[:5]] == [
        0,
        5 * MS,
        10 * MS,
        15 * MS,
        20 * MS,
    ]


def test_a_real_time_transport_plays_prefill_in_real_time_and_says_why() -> None:
    steps = [Play(speech(4 * N), "history", "prefill")]
    slow = plan_prefill(steps, N, 4.0, transport_fast=False)
    assert slow.fast_frames == 0 and slow.speed == 1.0 and "real time" in (slow.reason or "")
    assert plan_prefill(steps, N, 1.0, transport_fast=True).as_dict() == {
        "samples": 4 * N,
        "requested_speed": 1.0,
        "speed": 1.0,
        "fast_frames": 0,
    }
    assert plan_prefill([Pause(1.0)], N, 4.0, transport_fast=True).samples == 0


def test_only_drain_left_once_the_turns_are_played() -> None:
    from rig.core.director import Drain

    up = Uplink([Pause(0.02), Drain(1.0, 5.0)], Pacer(PacerConfig(RATE, N), T0))
    assert not up.only_drain_left
    frame = up.next_frame(quiet(T0))
    assert frame is not None
    up.sent(frame, T0)
    assert up.only_drain_left
