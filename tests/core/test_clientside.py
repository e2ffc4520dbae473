"""ClientUplink: the client's audio laid out where it passed, turns found in it, and a
session log that times a response exactly as the rig's own log does."""

from __future__ import annotations

import numpy as np

from rig.core.clientside import ClientUplink
from rig.core.events import DownAudio
from rig.core.listener import Listener
from rig.core.metrics import responses_of
from rig.core.records import ChunkRecord, UserAudio
from rig.core.units import NS_PER_MS

RATE = 16_000
N = 320  # 20 ms


def _frame(loud: bool) -> np.ndarray:
    return np.full(N, 4000 if loud else 0, dtype=np.int16)


def test_chunks_sit_where_they_arrived_and_gaps_are_silence() -> None:
    c = ClientUplink(t0_ns=0)
    recs = c.on_audio(_frame(True), RATE, 0)
    assert [type(r) for r in recs] == [UserAudio, ChunkRecord]
    recs = c.on_audio(_frame(True), RATE, 400 * NS_PER_MS)  # 380 ms with nothing sent
    assert isinstance(recs[0], UserAudio) and recs[0].pcm.size == 6400 - N
    assert c.end_sample == 6400 + N
    assert c.passed_ns(6400 + 10) == 400 * NS_PER_MS + 10 * 1_000_000_000 // RATE
    # faster than real time: queued behind the previous chunk, never overlapping
    c.on_audio(_frame(False), RATE, 400 * NS_PER_MS)
    assert c.chunks[-1].start_sample == 6400 + N
    # arrival jitter (here 115 ms late) closes up: no samples the system never got
    recs = c.on_audio(_frame(False), RATE, 555 * NS_PER_MS)
    assert c.chunks[-1].start_sample == 6400 + 2 * N and isinstance(recs[0], UserAudio)
    assert recs[0].pcm.size == N


def test_segments_join_into_one_turn_until_the_system_answers() -> None:
    c = ClientUplink(t0_ns=0)
    pattern = [1] * 10 + [0] * 20 + [1] * 10 + [0] * 40 + [1] * 5  # 400 ms pause, 800 ms
    for k, loud in enumerate(pattern):
        c.on_audio(_frame(bool(loud)), RATE, k * 20 * NS_PER_MS)
    assert len(c.segments) == 3
    (one,) = c.turns([])  # nobody answered: one long turn
    assert (one.speech_start_sample, one.speech_end_sample) == (0, 85 * N)
    a, b = c.turns([50 * 20 * NS_PER_MS])  # the system spoke in the long pause
    assert a.speech_end_sample == 40 * N and b.speech_start_sample == 80 * N


def test_log_gives_the_same_response_latency_as_the_passing_times() -> None:
    t0 = 5_000_000_000
    c, listener = ClientUplink(t0), Listener(t0)
    for k in range(50):  # 1 s of speech then 1 s of silence, 20 ms chunks, 0.3 ms late each
        c.on_audio(_frame(k < 25), RATE, t0 + k * 20 * NS_PER_MS + 300_000)
    reply_ns = t0 + 1_700 * NS_PER_MS
    listener.on_audio(DownAudio(np.full(800, 5000, dtype=np.int16), RATE, reply_ns))
    log = c.log(listener)
    (r,) = responses_of(log)
    end_ns = t0 + 25 * 20 * NS_PER_MS + 300_000  # the last speech sample's chunk end
    assert r["user_end_ns"] == end_ns
    assert r["latency_ms"] == round((reply_ns - end_ns) / 1e6, 3)
    assert log.frame_samples == N and len(log.send_ns) == 50
