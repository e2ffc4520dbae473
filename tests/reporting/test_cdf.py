"""`rig plot RUN_DIR`: the run's latency CDF, on a handmade run directory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rig.analysis.aggregate import load_run
from rig.cli import main
from rig.reporting.cdf import dkw_eps, ecdf, latencies_by_scenario

pytest.importorskip("matplotlib")


def make_run(root: Path) -> Path:
    run = root / "run"
    rng = np.random.default_rng(3)
    for k in range(12):
        d = run / "rollouts" / f"r{k:02d}"
        d.mkdir(parents=True)
        scenario = "fast" if k % 2 else "slow"
        base = 400.0 if k % 2 else 900.0
        responses = [{"latency_ms": float(base + rng.normal(0, 50))} for _ in range(3)]
        status = "ok" if k != 5 else "timed_out"
        m = {"status": status, "scenario": scenario, "item": f"i{k % 4}", "responses": responses}
        (d / "metrics.json").write_text(json.dumps(m))
    return run


def test_ecdf_and_band() -> None:
    x, y = ecdf([3.0, 1.0, 2.0, 2.0])
    assert x.tolist() == [1.0, 2.0, 2.0, 3.0] and y.tolist() == [0.25, 0.5, 0.75, 1.0]
    # DKW: n = 100 at 95 %: sqrt(ln(40) / 200) = 0.1358
    assert dkw_eps(100) == pytest.approx(0.1358, abs=1e-4)
    assert dkw_eps(400) == pytest.approx(dkw_eps(100) / 2)


def test_rig_plot_run_dir_draws_the_cdf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path)
    groups = latencies_by_scenario(load_run(run))
    assert sorted(groups) == ["fast", "slow"]
    assert len(groups["fast"]) == 15 and len(groups["slow"]) == 18  # timed_out left out
    assert main(["plot", str(run)]) == 0
    png = run / "latency_cdf.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert str(png) in capsys.readouterr().out
    assert main(["plot", str(run), "--labels", str(tmp_path / "l.txt")]) == 2
    empty = tmp_path / "empty"
    (empty / "rollouts").mkdir(parents=True)
    assert main(["plot", str(empty)]) == 2
