"""rig report as a CI step on a real run: gates, exit status, JUnit (read back with
junitparser, a JUnit consumer), tidy CSV (read back with pandas as-is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.demorun import broken_copy, demo_run

pytestmark = pytest.mark.realtime


def rig_report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", "report", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_run(tmp_path_factory)


def test_gates_pass_and_fail_with_one_line_each(run: Path) -> None:
    ok = rig_report(str(run), "--fail-under", "pass_rate=1", "--max", "latency_p95_ms=2000",
                    "--fail-under", "ok_rate=1", "--no-rollouts")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = rig_report(str(run), "--fail-under", "pass_rate=1", "--max", "latency_p95_ms=100",
                     "--max", "model_p99_ms=50", "--no-rollouts")  # fmt: skip
    assert bad.returncode == 1
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 2, bad.stderr
    assert lines[0].startswith("rig report: gate FAILED: latency_p95_ms = ")
    assert lines[0].endswith("wanted <= 100")
    assert lines[1].startswith("rig report: gate FAILED: model_p99_ms = ")


def test_usage_errors_exit_2(run: Path, tmp_path: Path) -> None:
    r = rig_report(str(run), "--max", "latency_p96_ms=100")
    assert r.returncode == 2 and "unknown metric 'latency_p96_ms'" in r.stderr
    r = rig_report(str(run), "--csv", str(tmp_path / "out.csv"))
    assert r.returncode == 2 and "--csv takes a directory" in r.stderr


def test_run_errors_exit_3_and_junit_has_a_case_per_rollout(run: Path, tmp_path: Path) -> None:
    from junitparser import Error, Failure, JUnitXml

    broken = broken_copy(run, tmp_path / "broken")
    junit = tmp_path / "junit.xml"
    r = rig_report(str(broken), "--junit", str(junit), "--max", "latency_p95_ms=5000")
    assert r.returncode == 3, r.stderr  # the gate holds, but a rollout did not finish
    assert "run error: recipe: error (TransportError: connection refused)" in r.stderr
    xml = JUnitXml.fromfile(str(junit))
    cases = {case.name: case for suite in xml for case in suite}
    assert set(cases) == {"recipe", "weather", "what", "latency_p95_ms <= 5000"}
    (err,) = cases["recipe"].result
    assert isinstance(err, Error) and err.type == "error"
    assert "connection refused" in (err.message or "")
    (fail,) = cases["weather"].result
    assert isinstance(fail, Failure) and fail.type == "timing_rule"
    assert fail.message == "turn_taking: every turn answered within 0.5 s <&>"
    assert cases["what"].is_passed and cases["latency_p95_ms <= 5000"].is_passed
    suite = next(s for s in xml if s.name == "rig.demo")
    assert (suite.tests, suite.failures, suite.errors) == (3, 1, 1)
    # a gate failing takes precedence: exit 1
    r = rig_report(str(broken), "--fail-under", "ok_rate=1")
    assert r.returncode == 1 and "ok_rate = 0.666667" in r.stderr


def test_tidy_csv_reads_into_pandas_as_is(run: Path, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    r = rig_report(str(run), "--csv", str(tmp_path / "csv"), "--json")
    assert r.returncode == 0, r.stderr
    rollouts = pd.read_csv(tmp_path / "csv" / "rollouts.csv")
    responses = pd.read_csv(tmp_path / "csv" / "responses.csv")
    summary = pd.read_csv(tmp_path / "csv" / "summary.csv")
    assert sorted(rollouts["rollout_id"]) == ["recipe", "weather", "what"]
    assert rollouts["status"].tolist() == ["ok"] * 3
    assert rollouts["pass"].dtype == bool and rollouts["pass"].all()
    assert rollouts["stalls"].dtype.kind == "i"
    assert len(responses) == 3
    for col in ("latency_ms", "uplink_ms", "model_ms", "downlink_ms", "queue_ms", "model_err_ms"):
        assert responses[col].dtype.kind == "f", col
    # the split adds up to the latency (measured on the same clock), within its error bars
    total = responses[["uplink_ms", "model_ms", "downlink_ms", "queue_ms"]].sum(axis=1)
    assert ((total - responses["latency_ms"]).abs() < 5.0).all()
    assert (responses["model_ms"] > 250).all()  # the sim's 300 ms model latency, less noise
    assert set(summary["item"]) == {"*", "recipe", "weather", "what"}
