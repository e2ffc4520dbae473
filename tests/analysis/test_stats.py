"""Statistics (median, IQR, bootstrap CI) and the run report over a handmade run directory."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.analysis.aggregate import aggregate, load_run, to_csv, write_csv, write_json
from rig.analysis.render import format_report
from rig.analysis.stats import bootstrap_ci, iqr, median, percentile, summarize
from rig.errors import ConfigError


def test_median_percentile_iqr() -> None:
    assert median([3, 1, 2]) == 2.0
    assert median([1, 2, 3, 4]) == 2.5
    assert percentile(list(range(101)), 90) == 90.0
    assert iqr([1, 2, 3, 4, 5]) == 2.0
    assert median([]) is None and iqr([]) is None
    assert median([1.0, math.nan, 3.0]) == 2.0  # non-finite values are ignored
    with pytest.raises(ConfigError):
        percentile([1.0], 101)


def test_bootstrap_is_seeded_and_degenerate_cases() -> None:
    x = np.random.default_rng(5).normal(100, 10, 30)
    assert bootstrap_ci(x, seed=7) == bootstrap_ci(x, seed=7)
    assert bootstrap_ci(x, seed=7) != bootstrap_ci(x, seed=8)
    assert bootstrap_ci([42.0]) == (42.0, 42.0)
    assert bootstrap_ci([]) is None
    with pytest.raises(ConfigError):
        bootstrap_ci(x, confidence=1.5)
    with pytest.raises(ConfigError):
        bootstrap_ci(x, clusters=["a"])


def test_bootstrap_ci_contains_true_median() -> None:
    true_median = 300.0  # lognormal latencies, median exp(mu)
    rng = np.random.default_rng(2024)
    sample = rng.lognormal(np.log(true_median), 0.4, 60)
    lo, hi = bootstrap_ci(sample, seed=1)  # type: ignore[misc]
    assert lo < true_median < hi
    # and it covers roughly as often as it claims over many seeded data sets
    hits = 0
    trials = 200
    for k in range(trials):
        s = rng.lognormal(np.log(true_median), 0.4, 40)
        ci = bootstrap_ci(s, seed=k, n_resamples=1000)
        assert ci is not None
        hits += ci[0] <= true_median <= ci[1]
    assert 0.85 <= hits / trials <= 0.995


def test_cluster_bootstrap_is_wider_when_items_differ() -> None:
    rng = np.random.default_rng(3)
    values, clusters = [], []
    for item, centre in enumerate([200, 400, 600, 800]):
        v = rng.normal(centre, 10, 25)
        values += list(v)
        clusters += [f"item{item}"] * len(v)
    naive = bootstrap_ci(values, seed=0)
    by_item = bootstrap_ci(values, seed=0, clusters=clusters)
    assert naive is not None and by_item is not None
    assert by_item[1] - by_item[0] > 2 * (naive[1] - naive[0])


def test_summarize_fields() -> None:
    s = summarize([10, 20, 30, 40, 50], seed=0)
    assert s["n"] == 5 and s["median"] == 30 and s["iqr"] == 20
    assert s["ci_low"] <= 30 <= s["ci_high"]
    assert summarize([]) == {"n": 0}


# -- aggregate over a handmade run directory -------------------------------------------------


def write_rollout(run: Path, rid: str, metrics: Any | None, raw: str | None = None) -> None:
    d = run / "rollouts" / rid
    d.mkdir(parents=True)
    if raw is not None:
        (d / "metrics.json").write_text(raw)
    elif metrics is not None:
        (d / "metrics.json").write_text(json.dumps(metrics))


def resp(latency_ms: float, **extra: float) -> dict[str, Any]:
    return {"user_end_ns": 0, "onset_ns": int(latency_ms * 1e6), "latency_ms": latency_ms, **extra}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run1"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"run_id": "run1", "seed": 11}))
    lat = {"a": [500, 520, 540], "b": [900, 950, 1000]}
    k = 0
    for item, values in lat.items():
        for v in values:
            write_rollout(
                run,
                f"r{k:03d}",
                {
                    "status": "ok",
                    "scenario": "timing",
                    "item": item,
                    "responses": [resp(v, uplink_ms=20.0, uplink_err_ms=2.0, model_ms=v - 60)],
                    "pass": v < 600,
                },
            )
            k += 1
    write_rollout(run, "r100", {"status": "timed_out", "scenario": "timing", "item": "a",
                                "responses": [resp(9999)]})  # fmt: skip
    write_rollout(run, "r101", None, raw='{"status": "ok", "respon')  # crashed mid-write
    write_rollout(run, "r102", None)  # no metrics.json at all
    write_rollout(run, "r103", {"status": "ok", "responses": [resp(300), resp(320)]})
    return run


def test_aggregate_groups_and_tolerates_broken_rollouts(run_dir: Path) -> None:
    data = load_run(run_dir)
    assert len(data.rollouts) == 10
    rep = aggregate(run_dir)
    assert rep["seed"] == 11 and rep["run_id"] == "run1"
    assert rep["status_counts"] == {"ok": 7, "timed_out": 1, "corrupt": 1, "missing": 1}
    assert {p["rollout"] for p in rep["problems"]} == {"r101", "r102"}
    scen = {s["scenario"]: s for s in rep["scenarios"]}
    assert set(scen) == {"default", "timing"}
    timing = scen["timing"]
    assert timing["n"] == 7 and timing["n_items"] == 2
    assert timing["latency_ms"]["n"] == 6  # timed_out rollout's 9999 is left out
    assert timing["latency_ms"]["median"] == pytest.approx(720.0)
    assert {k: timing["pass"][k] for k in ("evaluated", "passed", "rate")} == {
        "evaluated": 6,
        "passed": 3,
        "rate": 0.5,
    }
    # Wilson 95 % interval of 3/6 (textbook value 0.188-0.812)
    assert timing["pass"]["ci_low"] == pytest.approx(0.1876, abs=1e-3)
    assert timing["pass"]["ci_high"] == pytest.approx(0.8124, abs=1e-3)
    lat = timing["latency_ms"]
    assert lat["p95"] == pytest.approx(987.5)
    lo, hi = lat["p95_ci"]
    assert 500 <= lo <= lat["p95"] <= hi <= 1000
    up = timing["components"]["uplink_ms"]
    assert up["median"] == 20.0 and up["err_ms_median"] == 2.0
    assert "downlink_ms" not in timing["components"]
    items = {(i["scenario"], i["item"]): i for i in rep["items"]}
    assert items[("timing", "b")]["latency_ms"]["median"] == 950.0
    assert items[("timing", "a")]["status_counts"] == {"ok": 3, "timed_out": 1}
    default = scen["default"]
    assert default["latency_ms"]["median"] == 310.0
    assert default["status_counts"] == {"corrupt": 1, "missing": 1, "ok": 1}
    json.dumps(rep, allow_nan=False)
    # including other statuses is a choice of the caller
    all_status = aggregate(run_dir, statuses=("ok", "timed_out"))
    assert {s["scenario"]: s for s in all_status["scenarios"]}["timing"]["latency_ms"]["n"] == 7


def test_aggregate_exports(run_dir: Path, tmp_path: Path) -> None:
    rep = aggregate(run_dir)
    rows = list(csv.DictReader(io.StringIO(to_csv(rep))))
    keyed = {(r["scenario"], r["item"]): r for r in rows}
    assert float(keyed[("timing", "b")]["latency_median_ms"]) == 950.0
    assert keyed[("timing", "*")]["pass_rate"] == "0.5"
    assert keyed[("default", "*")]["status_counts"] == "corrupt=1;missing=1;ok=1"
    write_csv(rep, tmp_path / "r.csv")
    write_json(rep, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["n_rollouts"] == 10
    text = format_report(rep)
    assert "timing" in text and "950" in text and "r101: corrupt" in text


def test_aggregate_without_manifest_or_rollouts(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    rep = aggregate(tmp_path / "empty")
    assert rep["n_rollouts"] == 0 and rep["manifest_ok"] is False and rep["scenarios"] == []
    assert "0 rollouts" in format_report(rep)
    with pytest.raises(ConfigError):
        aggregate(tmp_path / "nope")


def test_report_prints_the_decomposition_and_clock_fits(tmp_path) -> None:
    import json
    import subprocess
    import sys

    run = tmp_path / "run"
    for i, model in enumerate((300.0, 320.0, 340.0)):
        d = run / "rollouts" / f"r{i}"
        d.mkdir(parents=True)
        resp = {
            "latency_ms": model + 60,
            "uplink_ms": 20.0,
            "uplink_err_ms": 2.0,
            "model_ms": model,
            "model_err_ms": 1.0,
            "downlink_ms": 30.0,
            "downlink_err_ms": 2.0,
            "queue_ms": 10.0,
            "queue_err_ms": 0.0,
        }
        fit = {
            "method": "envelope-two-way",
            "drift_ppm": 12.5,
            "drift_err_ppm": 3.0,
            "offset_err_ms": 0.4,
            "rtt": {"rtt_p50_ms": 50.2},
        }
        (d / "metrics.json").write_text(
            json.dumps(
                {
                    "status": "ok",
                    "scenario": "s",
                    "item": f"i{i}",
                    "responses": [resp],
                    "clock_fit": fit,
                }
            )
        )
    (run / "manifest.json").write_text(json.dumps({"run_id": "run", "seed": 0}))
    r = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(run)],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": ""},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "latency decomposition" in r.stdout
    assert "320.0 [310.0–330.0] ±1.0" in r.stdout  # model: median [p25–p75] ±error
    assert "envelope-two-way" in r.stdout and "12.5 ±3.0" in r.stdout


def test_rollouts_whose_own_timing_failed_are_counted_shown_and_left_out(run_dir: Path) -> None:
    bad = {"timing_valid": False, "rig_timing": {"reasons": ["3 stalled frames"]}}
    write_rollout(run_dir, "r200", {"status": "ok", "scenario": "timing", "item": "a",
                                    "responses": [resp(5000)], "pass": False, **bad})  # fmt: skip
    write_rollout(run_dir, "r201", {"status": "ok", "scenario": "timing", "item": "a",
                                    "responses": [resp(530)], "pass": True,
                                    "timing_valid": True})  # fmt: skip
    rep = aggregate(run_dir)
    timing = {s["scenario"]: s for s in rep["scenarios"]}["timing"]
    assert rep["timing_invalid"] == ["r200"] and rep["timing_invalid_excluded"]
    assert timing["timing_invalid"] == 1 and timing["status_counts"]["ok"] == 8  # still ok
    assert timing["latency_ms"]["n"] == 7  # 5000 ms left out, the valid 530 counted
    p = timing["pass"]
    assert (p["evaluated"], p["passed"], p["rate"]) == (7, 4, 4 / 7) and p["ci_method"] == "wilson"
    items = {(i["scenario"], i["item"]): i for i in rep["items"]}
    assert items[("timing", "a")]["timing_invalid"] == 1
    assert "timing-invalid=1" in format_report(rep)
    with_all = aggregate(run_dir, include_invalid_timing=True)
    timing = {s["scenario"]: s for s in with_all["scenarios"]}["timing"]
    assert timing["latency_ms"]["n"] == 8 and not with_all["timing_invalid_excluded"]
    # the whole run too (what rig report's gates read): the shard-merge test compared a merged
    # run whose flagged rollouts were left out of `overall` against one that had none
    assert with_all["overall"]["latency_ms"]["n"] == rep["overall"]["latency_ms"]["n"] + 1


def test_wilson_interval_known_values() -> None:
    from rig.analysis.stats import rate, wilson

    assert wilson(0, 0) is None
    lo, hi = wilson(0, 10)  # type: ignore[misc]
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(10, 10)  # type: ignore[misc]
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)
    lo, hi = wilson(1, 4, confidence=0.9)  # type: ignore[misc]
    assert lo == pytest.approx(0.0579, abs=1e-3) and hi == pytest.approx(0.6439, abs=1e-3)
    assert rate(0, 0)["rate"] is None and rate(2, 4)["ci_method"] == "wilson"
