"""`rig report` at 80 columns on a real run: no cell wrapped or cut, every column still
there (stacked), `--wide` at full width, legends for the columns that need one; the numbers
that alarmed a newcomer (a noise drift, a one-item scenario's zero-width CI) read right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rig.reporting.layout import natural_width, stack_columns
from tests.support.cli import rig
from tests.support.demorun import demo_run

pytestmark = pytest.mark.realtime

HEADERS = ("latency p50 ms", "IQR ms", "95% CI ms", "p95 ms [CI]", "pass [Wilson CI]",
           "uplink", "model", "downlink", "queue", "detect", "generation", "method")  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_run(tmp_path_factory)


def test_at_80_columns_nothing_is_wrapped_or_cut(run: Path) -> None:
    r = rig("report", str(run), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "…" not in r.stdout
    for header in HEADERS:
        assert header in r.stdout, header
    # one line per row: every rollout row of the split table is on one line with its method
    rows = [line for line in lines if line.startswith("│ what ")]
    assert rows and all(line.rstrip().endswith("│") for line in rows)
    assert "envelope-two-way" in r.stdout
    assert "run demo: 3 rollouts" in r.stdout


def test_wide_prints_each_table_whole(run: Path) -> None:
    r = rig("report", str(run), "--wide", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "scenario / item" in line)
    assert "pass [Wilson CI]" in header and "latency p50 ms" in header
    assert max(len(line) for line in r.stdout.splitlines()) > 80


def test_legends_say_what_late_rig_and_tcp_info_mean(run: Path) -> None:
    r = rig("report", str(run), env={"COLUMNS": "120"})
    text = " ".join(r.stdout.split())
    assert "late p50/p99/max: the rig's own uplink send lateness, ms" in text
    assert "rig: the rig's own timing held (ok) or not" in text
    assert "tcp_info: the kernel's smoothed RTT, inflated by delayed ACKs" in text


def test_a_drift_fitted_over_too_short_a_span_is_not_printed(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "short"
    shutil.copytree(run, copy)
    path = copy / "rollouts" / "what" / "metrics.json"
    m = json.loads(path.read_text())
    m["clock_fit"].update(drift_ppm=-1112.2, drift_err_ppm=3471.2, span_s=1.9)
    path.write_text(json.dumps(m))
    r = rig("report", str(copy), "--wide")
    assert r.returncode == 0, r.stderr
    assert "-1112.2" not in r.stdout and "3471" not in r.stdout
    assert "not enough span to fit drift (1.9 s of probes)" in r.stdout


def test_a_scenario_of_one_item_has_that_items_ci(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "one"
    shutil.copytree(run, copy)
    for path in copy.glob("rollouts/*/metrics.json"):
        m = json.loads(path.read_text())
        m["item"] = "what"  # three rollouts of one item
        path.write_text(json.dumps(m))
    r = rig("report", str(copy), "--json")
    report = json.loads(r.stdout)
    (scenario,) = report["scenarios"]
    (item,) = report["items"]
    keys = ("ci_low", "ci_high")
    assert [scenario["latency_ms"][k] for k in keys] == [item["latency_ms"][k] for k in keys]
    assert scenario["latency_ms"]["ci_low"] < scenario["latency_ms"]["ci_high"]


def test_stacked_parts_each_fit_and_keep_the_key_column() -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=60, file=open("/dev/null", "w"))  # noqa: SIM115
    t = Table(title="t")
    for i in range(9):
        t.add_column(f"column{i}")
    t.add_row(*[f"value{i}" for i in range(9)])
    parts = stack_columns(console, t, 60)
    assert len(parts) > 1
    assert all(natural_width(console, p) <= 60 for p in parts)
    assert all(p.columns[0].header == "column0" for p in parts)
    assert [c.header for p in parts for c in p.columns[1:]] == [f"column{i}" for i in range(1, 9)]
