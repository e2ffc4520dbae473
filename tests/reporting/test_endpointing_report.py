"""`rig report` shows endpointing vs generation per scenario: median, IQR, error, methods."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from rig.analysis.aggregate import aggregate, csv_rows
from rig.analysis.render import format_report
from rig.cli import main


def _response(detect: float, gen: float, offset: float, method: str) -> dict:
    return {
        "latency_ms": detect + gen + 20,
        "detect_ms": detect,
        "detect_err_ms": 2.0,
        "detect_method": method,
        "generation_ms": gen,
        "generation_err_ms": 1.0,
        "generation_method": method,
        "speech_end_offset_ms": offset,
    }


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    rows = {
        "fast": [(200.0, 300.0), (220.0, 310.0), (240.0, 290.0)],
        "slow": [(800.0, 100.0), (820.0, 120.0), (900.0, 110.0)],
    }
    for sc, vals in rows.items():
        for i, (d, g) in enumerate(vals):
            path = run / "rollouts" / f"{sc}-{i}"
            path.mkdir(parents=True)
            m = {
                "status": "ok",
                "scenario": sc,
                "item": "a",
                "responses": [_response(d, g, 1.5, "rtt_half"), {"detect_ms": None}],
            }
            (path / "metrics.json").write_text(json.dumps(m))
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "seed": 1}))
    return run


def test_report_has_median_iqr_and_methods_of_detect_and_generation(tmp_path, monkeypatch):
    run = _run(tmp_path)
    rep = aggregate(run)
    fast = next(s for s in rep["scenarios"] if s["scenario"] == "fast")
    assert fast["components"]["detect_ms"]["median"] == pytest.approx(220.0)
    assert fast["components"]["detect_ms"]["iqr"] == pytest.approx(20.0)
    assert fast["components"]["generation_ms"]["median"] == pytest.approx(300.0)
    assert fast["components"]["detect_ms"]["methods"] == {"rtt_half": 3}
    assert fast["components"]["detect_ms"]["err_ms_median"] == 2.0
    assert "model_ms" not in fast["components"]  # no split: no decomposition table
    text = format_report(rep, width=200)
    assert "endpointing vs generation" in text and "latency decomposition" not in text
    assert "220.0 [210.0–230.0] ±2.0" in text and "rtt_half" in text
    row = next(r for r in csv_rows(rep) if r["scenario"] == "slow" and r["item"] == "*")
    assert row["detect_median_ms"] == pytest.approx(820.0)
    assert row["generation_median_ms"] == pytest.approx(110.0)
    assert row["speech_end_offset_median_ms"] == pytest.approx(1.5)
    monkeypatch.setenv("COLUMNS", "220")
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["report", str(run), "--no-rollouts"]) == 0
    out = buf.getvalue()
    assert "endpointing vs generation" in out and "820.0" in out
