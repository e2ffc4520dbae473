"""metrics.json from a session log and an outcome: one pure function, checked by hand."""

from __future__ import annotations

import pytest

from rig.core.director import TurnRecord
from rig.core.log import SessionLog
from rig.core.metrics import Outcome, build_metrics, drift_ms, metrics_without_stream
from rig.core.responses import Onset
from rig.core.uplink import Prefill
from rig.errors import DeviceError, ProtocolError, RigError, TransportError

RATE = 16_000
N = 320
MS = 1_000_000
T0 = 2_000 * MS


def _log(**kw: object) -> SessionLog:
    frames = 200  # 4 s sent, frame 60 went out 3 ms late
    send = tuple(T0 + k * 20 * MS + (3 * MS if k == 60 else 0) for k in range(frames))
    base: dict[str, object] = dict(
        t0_ns=T0,
        sample_rate=RATE,
        frame_samples=N,
        send_ns=send,
        lateness_ns=tuple(s - (T0 + k * 20 * MS) for k, s in enumerate(send)),
        prefill=Prefill(0, 1.0),
        # turn 0 speaks until sample 60*N + 160 (inside the late frame), turn 1 from 3 s
        turns=(
            TurnRecord(0, "turn", "a", 0, 64 * N, 8000, 60 * N + 160),
            TurnRecord(1, "turn", "b", 140 * N, 200 * N, 150 * N, 190 * N),
        ),
        onsets=(
            Onset(T0 + 1_900 * MS, T0 + 1_880 * MS, None, 3),  # reply to turn 0
            Onset(T0 + 2_500 * MS, T0 + 2_490 * MS, None, 9),  # still before turn 1 starts
        ),
        down_chunks=12,
        down_samples=12 * 480,
        down_rate=24_000,
        truncated_items=("x",),
    )
    base.update(kw)
    return SessionLog(**base)  # type: ignore[arg-type]


def test_responses_are_timed_from_the_user_end_as_sent_to_the_onset_as_heard() -> None:
    m = build_metrics(_log(), Outcome("ok"), rollout_id="r", meta={"item": "i"})
    assert m["status"] == "ok" and m["rollout_id"] == "r" and m["item"] == "i"
    first, second = m["responses"]
    user_end = T0 + 60 * 20 * MS + 3 * MS + 10 * MS  # frame 60's actual send + 160 samples
    assert first["user_end_ns"] == user_end
    assert first["latency_ms"] == pytest.approx((T0 + 1_900 * MS - user_end) / MS)
    assert first["latency_arrival_ms"] == pytest.approx((T0 + 1_880 * MS - user_end) / MS)
    assert first["onset_chunk_seq"] == 3
    # turn 1 ends at 3.8 s: no onset after it
    assert second["latency_ms"] is None and second["reason"]
    assert m["onsets_play_ns"] == [T0 + 1_900 * MS, T0 + 2_500 * MS]


def test_uplink_and_downlink_blocks() -> None:
    m = build_metrics(_log(), Outcome("ok"), rollout_id="r", writer_high_water=7)
    up, down = m["uplink"], m["downlink"]
    assert up["frames"] == 200 and up["audio_s"] == 4.0 and up["stalls"] == 0
    assert up["lateness_ms"]["max"] == 3.0 and up["drift_ms"] == 0.0
    assert up["prefill"] == {"samples": 0, "requested_speed": 1.0, "speed": 1.0, "fast_frames": 0}
    assert down == {
        "chunks": 12,
        "audio_s": 0.24,
        "truncated_samples": 0,
        "dropped_after_truncate_samples": 0,
        "truncated_items": ["x"],
    }
    assert m["frame_ms"] == 20.0 and m["system_sample_rate"] == 24_000
    assert m["t0_ns"] == T0 and m["clock_fit"] is None and m["writer_backlog_high_water"] == 7


def test_a_clean_end_without_system_audio_is_no_audio() -> None:
    silent = _log(down_chunks=0, down_samples=0, down_rate=None, onsets=())
    assert Outcome("ok").settled(silent) == Outcome("no_audio", "the system sent no audio")
    assert Outcome("timed_out", "cap").settled(silent) == Outcome("timed_out", "cap")
    m = build_metrics(silent, Outcome("ok").settled(silent), rollout_id="r")
    assert m["status"] == "no_audio" and m["downlink"]["audio_s"] == 0.0


def test_errors_say_whose_fault_it_was() -> None:
    assert Outcome.of_error(ProtocolError("garbage")).status == "protocol_error"
    assert Outcome.of_error(TransportError("gone")).status == "transport_error"
    assert Outcome.of_error(DeviceError("unplugged")).status == "device_error"
    assert Outcome.of_error(RigError("")) == Outcome("error", "RigError")
    m = metrics_without_stream(Outcome("transport_error", "refused"), rollout_id="r", meta={"a": 1})
    assert m == {"status": "transport_error", "reason": "refused", "rollout_id": "r", "a": 1,
                 "tags": {}, "reference": None, "marks": [], "censored": False,
                 "responses": []}  # fmt: skip


def test_drift_is_the_trend_of_lateness_not_its_level() -> None:
    assert drift_ms([5 * MS] * 200) == 0.0
    assert drift_ms([0] * 100 + [MS] * 100) == 1.0
    assert drift_ms([MS] * 99) is None  # too short to tell
