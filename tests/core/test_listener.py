"""The listener with plain calls: arrivals in, records and control requests out (no asyncio)."""

from __future__ import annotations

import numpy as np
import pytest

from rig.core.events import ControlRequest, DownAudio, DownEvent
from rig.core.listener import Listener, ListenerConfig
from rig.core.records import (
    ChunkRecord,
    EventRecord,
    Probe,
    ReceivedAudio,
    ServerMark,
    SystemAudio,
    SystemPad,
)
from rig.errors import ProtocolError

RATE = 16_000
MS = 1_000_000
T0 = 1_000 * MS
CHUNK = 320  # 20 ms


def loud(n: int = CHUNK) -> np.ndarray:
    return np.full(n, 8000, np.int16)


def quiet(n: int = CHUNK) -> np.ndarray:
    return np.zeros(n, np.int16)


def audio(pcm: np.ndarray, t_ns: int, **extra: object) -> DownAudio:
    return DownAudio(pcm, RATE, t_ns, None, dict(extra) or None)


def chunks(out: list[object]) -> list[ChunkRecord]:
    return [r for r in out if isinstance(r, ChunkRecord)]


def test_audio_faster_than_real_time_is_placed_back_to_back() -> None:
    lis = Listener(T0)
    plays = []
    for k in range(5):  # all five arrive at once, 100 ms into the session
        (rec,) = chunks(lis.on_audio(audio(quiet(), T0 + 100 * MS)))
        assert rec.dir == "down" and rec.seq == k and rec.t_ns == T0 + 100 * MS
        plays.append(rec.play_ns)
    assert plays == [T0 + (100 + 20 * k) * MS for k in range(5)]
    assert lis.down_chunks == 5 and lis.down_samples == 5 * CHUNK and lis.down_rate == RATE
    assert [c.play_ns for c in lis.heard] == plays


def test_an_onset_is_recorded_where_it_is_heard_before_its_chunk_row() -> None:
    lis = Listener(T0)
    lis.on_audio(audio(loud(), T0))  # first reply plays 0-20 ms
    lis.on_audio(audio(loud(), T0 + 5 * MS))  # queued behind it: no new onset
    assert len(lis.onsets) == 1
    out = lis.on_audio(audio(loud(), T0 + 500 * MS))  # after 480 ms of quiet: a new segment
    onset, row, received = out
    assert isinstance(received, ReceivedAudio) and received.pcm.size == CHUNK
    assert isinstance(onset, EventRecord) and onset.kind == "system.onset"
    assert onset.data == {"play_ns": T0 + 500 * MS, "seq": 2}
    assert (
        isinstance(row, ChunkRecord) and row.level is not None
    )  # measured by whoever reads it (the writer)
    assert [o.play_ns for o in lis.onsets] == [T0, T0 + 500 * MS]
    assert lis.onsets[1].arrival_ns == T0 + 500 * MS and lis.onsets[1].chunk_seq == 2


def test_observe_tells_the_director_what_is_heard() -> None:
    lis = Listener(T0)
    before = lis.observe(T0)
    assert not before.system_busy and before.system_quiet_since_ns is None and before.onsets == 0
    lis.on_audio(audio(loud(3 * CHUNK), T0))  # heard until 60 ms
    busy = lis.observe(T0 + 30 * MS)
    assert busy.system_busy and busy.last_onset_ns == T0 and busy.onsets == 1
    done = lis.observe(T0 + 60 * MS)
    assert not done.system_busy and done.system_quiet_since_ns == T0 + 60 * MS


def test_release_hands_out_what_has_played_once_and_finish_pads_the_track() -> None:
    lis = Listener(T0)
    lis.on_audio(audio(loud(2 * CHUNK), T0))
    first = lis.release(T0 + 10 * MS)
    assert [(a.start_sample, a.pcm.size) for a in first] == [(0, 160)]
    assert lis.release(T0 + 10 * MS) == []
    rest = lis.finish(T0 + 100 * MS, user_track_ns=2e9)
    assert isinstance(rest[0], SystemAudio) and rest[0].start_sample == 160
    assert rest[-1] == SystemPad(RATE, 32_000)


def test_barge_in_truncates_what_is_still_queued_and_asks_the_system_to_truncate() -> None:
    lis = Listener(T0)
    lis.on_audio(audio(loud(5 * CHUNK), T0, item_id="item-1"))  # plays 0-100 ms
    out = lis.barge_in(turn=1, t_ns=T0 + 30 * MS)
    played, event, request = out
    assert isinstance(played, SystemAudio) and played.pcm.size == 480  # 0-30 ms
    assert isinstance(event, EventRecord) and event.kind == "playback.truncate"
    assert event.data == {"turn": 1, "dropped_samples": 1120, "played_until_ms": 30.0}
    assert request == ControlRequest(
        "truncate",
        {"turn": 1, "played_samples": 480, "sample_rate": RATE, "dropped_samples": 1120},
    )
    assert lis.truncated_samples == 1120 and lis.truncated_items == {"item-1"}
    assert not lis.observe(T0 + 40 * MS).system_busy


def test_a_cut_item_that_keeps_arriving_is_recorded_but_never_played() -> None:
    lis = Listener(T0)
    lis.on_audio(audio(loud(), T0, item_id="a"))
    lis.barge_in(0, T0 + 10 * MS)
    row, received = lis.on_audio(audio(loud(), T0 + 40 * MS, item_id="a"))
    assert isinstance(row, ChunkRecord) and row.play_ns is None and row.seq == 1
    # never played, but kept as the system sent it (received.wav: yield on its own stream)
    assert isinstance(received, ReceivedAudio) and received.pcm.size == CHUNK
    assert row.extra == {"item_id": "a", "dropped": "truncated_item"}
    assert lis.dropped_samples == CHUNK and lis.down_chunks == 2 and len(lis.heard) == 1
    (row2,) = chunks(lis.on_audio(audio(loud(), T0 + 60 * MS, item_id="b")))  # the next reply
    assert row2.play_ns == T0 + 60 * MS and row2.seq == 2


def test_no_barge_in_while_quiet_or_when_turned_off() -> None:
    lis = Listener(T0)
    assert lis.barge_in(0, T0) == []  # nothing heard yet
    lis.on_audio(audio(loud(), T0))
    assert lis.barge_in(0, T0 + 50 * MS) == []  # already over
    off = Listener(T0, ListenerConfig(truncate_on_barge_in=False))
    off.on_audio(audio(loud(5 * CHUNK), T0))
    assert off.barge_in(0, T0 + 10 * MS) == []


def test_events_become_records_probes_and_server_marks() -> None:
    lis = Listener(T0)
    reply = {"id": 3, "t0_ns": 10, "t1_server_ns": 20, "t2_server_ns": 25}
    (rec,) = lis.on_event(DownEvent("probe_reply", 40, reply, 1.5))
    assert rec == EventRecord("server.probe_reply", 40, {**reply, "server_ts_ms": 1.5}, "server")
    assert lis.probes == [Probe(10, 20, 25, 40)] and lis.marks == []
    (bad,) = lis.on_event(DownEvent("probe_reply", 41, {"id": 4}))  # kept, but no exchange
    assert bad.kind == "server.probe_reply" and len(lis.probes) == 1
    lis.on_event(DownEvent("speech_stopped", 50, {"audio_end_ms": 1234}, 2.0))
    assert lis.marks == [ServerMark("speech_stopped", 50, 2 * MS, 1234.0)]
    lis.on_event(DownEvent("rtcp.rr", 60, {"rtt_ms": 12.5}))
    assert lis.path_rtt_ms == [12.5]
    (own,) = lis.on_event(DownEvent("history.sent", 70, {"items": 2}, source="rig"))
    assert own == EventRecord("history.sent", 70, {"items": 2}, "rig")
    lis.on_audio(DownAudio(quiet(), RATE, 80, 3.0))
    assert lis.down_pairs == [(2 * MS, 50), (3 * MS, 80)]  # stamped events, then audio


def test_a_downlink_rate_change_is_a_protocol_error() -> None:
    lis = Listener(T0)
    lis.on_audio(audio(quiet(), T0))
    with pytest.raises(ProtocolError, match="sample rate changed"):
        lis.on_audio(DownAudio(quiet(), 24_000, T0 + MS))
