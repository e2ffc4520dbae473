"""eot_int on hand-built run directories: TurnBench's window matcher, negatives, excluded
spans, server VAD predictions; every number worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rig.errors import ConfigError
from rig.scoring.eot_int import match
from rig.scoring.registry import score_dir
from tests.support.scoringrun import T0_NS, mark, rollout


def _metrics(doc: dict[str, Any], **group: str) -> dict[str, Any]:
    entry = doc["scorers"]["eot_int"]
    return next(g for g in entry["groups"] if g["group"] == group)["metrics"]


def test_earliest_unclaimed_prediction_in_the_window() -> None:
    # anchors 5.0 and 5.5, predictions 5.1 and 5.3: 5.0 takes 5.1 (+100 ms), 5.5 takes
    # 5.3 (-200 ms, inside the 250 ms tolerance)
    deltas, claimed = match([5.0, 5.5], [5.1, 5.3], 0.25, 3.0)
    assert [round(d * 1000) for d in deltas if d is not None] == [100, -200]
    assert claimed == {0, 1}
    # a prediction 5.2 is 300 ms before 5.5: outside [5.25, 8.5], so 5.5 is missed
    deltas, _ = match([5.0, 5.5], [5.1, 5.2], 0.25, 3.0)
    assert deltas[1] is None
    # past the deadline (3.0 s) is a miss
    assert match([1.0], [4.01], 0.25, 3.0)[0] == [None]


def _turnbench(run: Path) -> None:
    # system onsets 4.9, 7.5, 12.0, 15.2; anchors eot 5.0, 10.0 and int 7.0; eot negatives
    # [15, 16) (15.2 fires in it: FP) and [17, 18) (quiet: TN)
    rollout(
        run, "x", system=[(4.9, 5.5), (7.5, 8.0), (12.0, 12.5), (15.2, 15.6)],
        marks=[mark("eot", 5.0), mark("eot", 10.0), mark("int", 7.0),
               mark("negative", 15.0, 16.0, "eot"), mark("negative", 17.0, 18.0, "eot")],
        tags={"type": "casual"},
    )  # fmt: skip
    # a system that never speaks: recall 0, FPR 0
    rollout(run, "never", system=[],
            marks=[mark("eot", 5.0), mark("negative", 6.0, 7.0, "eot")],
            tags={"type": "narrative"})  # fmt: skip


def test_recall_fpr_and_signed_delay(tmp_path: Path) -> None:
    _turnbench(tmp_path)
    doc = score_dir(tmp_path, ["eot_int"], by=["type"])
    m = _metrics(doc, type="casual")
    # eot 5.0 <- 4.9 (-100 ms), eot 10.0 <- 12.0 (+2000 ms): recall 2/2
    assert (m["eot_recall"]["k"], m["eot_recall"]["n"]) == (2, 2)
    # int 7.0 <- 7.5 (+500 ms), from the same onsets (playback source)
    assert m["int_recall"]["value"] == 1.0
    assert m["int_delta_p50_ms"]["value"] == 500.0
    # FP on [15, 16), TN on [17, 18): FPR 1/2, over the 0.15 budget
    assert (m["eot_fpr"]["k"], m["eot_fpr"]["n"]) == (1, 2)
    assert m["eot_fpr"]["within_budget"] is False
    # delta t over [-100, 2000], linear percentiles: p10 = -100 + 0.1 * 2100 = 110,
    # p50 = 950, p90 = 1790
    assert m["eot_delta_p10_ms"]["value"] == pytest.approx(110.0)
    assert m["eot_delta_p50_ms"]["value"] == pytest.approx(950.0)
    assert m["eot_delta_p90_ms"]["value"] == pytest.approx(1790.0)
    never = _metrics(doc, type="narrative")
    assert never["eot_recall"]["value"] == 0.0 and never["eot_fpr"]["value"] == 0.0
    assert never["eot_recall"]["ci_high"] == pytest.approx(0.7935, abs=1e-4)  # Wilson 0/1
    allm = _metrics(doc)
    assert (allm["eot_recall"]["k"], allm["eot_recall"]["n"]) == (2, 3)
    assert (allm["eot_fpr"]["k"], allm["eot_fpr"]["n"]) == (1, 3)


def test_excluded_spans_drop_predictions_and_export(tmp_path: Path) -> None:
    # the 12.0 onset lies in an excluded span: eot 10.0 is then missed (recall 1/2)
    rollout(tmp_path, "x", system=[(4.9, 5.5), (12.0, 12.5)],
            marks=[mark("eot", 5.0), mark("eot", 10.0), mark("exclude", 11.5, 12.5)])  # fmt: skip
    out = tmp_path / "preds.json"
    doc = score_dir(tmp_path, ["eot_int"], [f"export={out}"])
    assert _metrics(doc)["eot_recall"]["k"] == 1
    (row,) = json.loads(out.read_text())
    assert row["item"] == "x" and row["predictions"]["eot"] == [4.9]
    assert row["anchors"]["eot"] == [5.0, 10.0]


def test_server_vad_predictions_on_the_fitted_clock(tmp_path: Path) -> None:
    # the server clock runs 2 s behind the shared clock (rate 1): its speech_stopped at
    # server time T0 + 3.3 s - 2 s is at 3.3 s on the session timeline (+300 ms on eot 3.0)
    fit = {
        "method": "test", "n_samples": 10, "refused": False, "split": True,
        "drift_fitted": True, "local_ref_ns": T0_NS, "peer_ref_ns": T0_NS - 2_000_000_000,
        "peer_first_ns": 0, "peer_last_ns": 0, "rate": 1.0, "offset_err_ms": 0.1,
        "drift_err_ppm": 1.0, "residual_p50_ms": 0, "residual_p95_ms": 0,
        "residual_max_ms": 0,
    }  # fmt: skip
    stopped = {
        "kind": "server.speech_stopped",
        "source": "server",
        "t_ns": T0_NS + 3_400_000_000,
        "server_ts_ms": (T0_NS - 2e9 + 3.3e9) / 1e6,
    }
    rollout(tmp_path, "v", system=[(9.0, 9.5)], marks=[mark("eot", 3.0)],
            events=[stopped], extra={"clock_fit": fit})  # fmt: skip
    doc = score_dir(tmp_path, ["eot_int"], ["source=server_vad"])
    assert _metrics(doc)["eot_delta_p50_ms"]["value"] == pytest.approx(300.0, abs=0.01)
    assert doc["scorers"]["eot_int"]["predictions_timed_by"] == ["server_clock"]
    # without a clock fit: the arrival time (3.4 s, +400 ms: includes the downlink)
    other = tmp_path / "b"
    rollout(other, "v", system=[], marks=[mark("eot", 3.0)], events=[stopped])
    doc = score_dir(other, ["eot_int"], ["eot_int.source=server_vad"])
    assert _metrics(doc)["eot_delta_p50_ms"]["value"] == pytest.approx(400.0, abs=0.01)
    assert doc["scorers"]["eot_int"]["predictions_timed_by"] == ["arrival"]


def test_bad_source_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="source must be one of"):
        score_dir(tmp_path, ["eot_int"], ["source=asr"])
