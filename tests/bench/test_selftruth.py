"""bench/selftruth.py, the judge of the self-check's calibration: a rollout's actual errors
against a truth log, on hand-made records whose errors are known."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import selftruth  # noqa: E402

MS = 1_000_000
T0 = 1_000 * MS


def _rollout(tmp_path: Path, *, onset_late_ms: float, end_frame_late_ms: float) -> Path:
    """A rollout of 60 frames (user's end 5 ms into frame 20), a reply of 3 chunks from
    1.0 s after T0, the rig's arrival stamp of the first one `onset_late_ms` after the sim
    sent it, and the truth log of that connection (conn 7) beside another one."""
    d = tmp_path / "r"
    d.mkdir()
    up = []
    for k in range(60):
        sched = T0 + k * 20 * MS
        late = round((end_frame_late_ms if k == 20 else 0.2) * MS)
        up.append({"dir": "up", "seq": k, "t_ns": sched + late, "t_sched_ns": sched})
    sent = [T0 + 1_000 * MS + i * 40 * MS for i in range(3)]
    down = [
        {"dir": "down", "seq": i, "t_ns": t + (round(onset_late_ms * MS) if i == 0 else 50_000)}
        for i, t in enumerate(sent)
    ]
    (d / "chunks.jsonl").write_text("".join(json.dumps(c) + "\n" for c in up + down))
    user_end = up[20]["t_ns"] + 5 * MS
    metrics = {
        "rollout_id": "r",
        "item": "turn_taking",
        "status": "ok",
        "timing_valid": True,
        "uplink": {"lateness_ms": {"p99": 0.2, "max": end_frame_late_ms}, "stalls": 0},
        "rig_timing": {
            "reasons": [],
            "loop": {"lag_p99_ms": 0.5, "lag_max_ms": 1.0, "run_delay_share": 0.07},
            "figures": {"onsets": [{"seq": 0, "stamp_ms": 1.0}], "latencies": []},
        },
        "responses": [
            {
                "turn": 0,
                "user_end_ns": user_end,
                "onset_chunk_seq": 0,
                "onset_arrival_ns": down[0]["t_ns"],
                "latency_arrival_ms": (down[0]["t_ns"] - user_end) / MS,
            }
        ],
    }
    (d / "metrics.json").write_text(json.dumps(metrics))
    detect = T0 + 40 * 20 * MS + 300_000  # frame 40's arrival completed the endpointing
    truth = [{"event": "recv_chunk", "t_ns": 0, "conn": 3, "seq": 0, "client_ts_ms": 5.0,
              "t_wire_ns": 0}]  # fmt: skip
    for c in up:
        t = detect if c["seq"] == 40 else c["t_ns"] + 300_000
        wire = c["t_ns"] + 100_000
        truth.append({"event": "recv_chunk", "t_ns": t, "conn": 7, "seq": c["seq"],
                      "t_wire_ns": wire, "client_ts_ms": c["t_ns"] / MS})  # fmt: skip
    truth += [
        {"event": "speech_end", "t_ns": detect, "conn": 7, "audio_end_ns": user_end},
        {"event": "reply_scheduled", "t_ns": detect, "conn": 7, "response": 1},
        {"event": "reply_start", "t_ns": sent[0], "conn": 7, "response": 1},
    ]
    truth += [{"event": "reply_chunk", "t_ns": t, "conn": 7, "response": 1} for t in sent]
    (tmp_path / "truth.jsonl").write_text("".join(json.dumps(e) + "\n" for e in truth))
    return d


def test_a_clean_rollout_is_within_and_its_errors_are_the_transit_only(tmp_path) -> None:
    d = _rollout(tmp_path, onset_late_ms=0.05, end_frame_late_ms=0.2)
    row = selftruth.rollout_row(str(d), selftruth.Truth(str(tmp_path / "truth.jsonl")))
    t = row["truth"]
    assert row["conn"] == 7
    assert t["onsets"] == [{"seq": 0, "bound_ms": 1.0, "err_ms": 0.05}]
    # ideal: the sim's send from the *scheduled* end, less the 0.2 ms the rig sent the
    # detection frame late; the rig's latency runs from its send of the end frame (0.2 late)
    assert t["responses"][0]["latency_err_ms"] == pytest.approx(0.05 - 0.2 + 0.2, abs=1e-3)
    assert t["sent_to_sim_min_ms"] == 0.1 and t["pace_max_ms"] == 0.2
    assert selftruth.actually_bad(row) == []
    assert selftruth.old_flag(row)  # the CPU-wait share (7 %) cried wolf
    assert not selftruth.new_flag(row)


def test_a_late_onset_stamp_and_a_late_end_frame_are_actual_errors(tmp_path) -> None:
    d = _rollout(tmp_path, onset_late_ms=7.0, end_frame_late_ms=6.0)
    row = selftruth.rollout_row(str(d), selftruth.Truth(str(tmp_path / "truth.jsonl")))
    t = row["truth"]
    assert t["onsets"][0]["err_ms"] == 7.0
    assert t["responses"][0]["latency_err_ms"] == pytest.approx(7.0 - 6.0 + 0.2, abs=1e-3)
    assert t["responses"][0]["end_frame_late_ms"] == 6.0
    assert selftruth.actually_bad(row) == ["onset"]
    # the rig recorded a 1 ms bound at the onset: a miss of the onset, but its latency bound
    # (onset bound + the end frame's 6 ms) is over the tolerance, so the rollout is flagged
    assert selftruth.new_flag(row)
    m = selftruth.matrix([row], selftruth.new_flag)
    assert (m["flagged_bad"], m["missed_bad"], m["miss_rate"]) == (1, 0, 0.0)
    om = selftruth.onset_matrix([row])
    assert om["missed_off"] == 1 and om["worst_error_above_bound_ms"] == 6.0
