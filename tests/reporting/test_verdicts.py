"""The text report says what "pass" tested, turns are numbered alike everywhere, and the
timeline marks the yield: a real run of turn, interruption, turn against `rig sim`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rig.scenarios import data_path
from tests.support.cli import rig
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime

SCENARIO = """
[suite]
name = "two"
[[items]]
id = "barge"
kind = "interruption"
steps = [
  {{ type = "turn", file = "{d}/question.wav", label = "q" }},
  {{ type = "inject", role = "interruption", file = "{d}/interrupt.wav", offset_s = 0.3 }},
  {{ type = "release", quiet_s = 1.0, timeout_s = 10 }},
  {{ type = "turn", file = "{d}/question.wav", label = "again" }},
  {{ type = "drain", quiet_s = 1.0, max_s = 10 }},
]
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verdicts")
    scenario = out / "two.toml"
    scenario.write_text(SCENARIO.format(d=data_path("timing")))
    sim, url = start_sim()
    try:
        r = rig("run", str(scenario), "--target", url, "--headless", "--out", str(out),
                "--run-id", "two")  # fmt: skip
    finally:
        stop_sim(sim)
    assert r.returncode in (0, 3), r.stderr
    return out / "two"


def test_the_report_states_the_rule_and_the_measured_yield(run: Path) -> None:
    r = rig("report", str(run), "--no-rollouts", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    assert "what pass tested (per rollout)" in r.stdout
    text = " ".join(r.stdout.replace("│", " ").split())
    assert "interruption: system yields within 1 s of barge-in" in text
    assert "yield" in text and "ms after the barge-in at" in text


def test_turns_are_numbered_0_and_1_in_the_split_table_and_the_labels(
    run: Path, tmp_path: Path
) -> None:
    r = rig("report", str(run), "--no-rollouts", "--wide")
    split = r.stdout.split("network share per response")[1].split("└")[0]
    rows = [line.split("│") for line in split.splitlines() if line.startswith("│ barge ")]
    turns = [cells[2].strip() for cells in rows]
    assert turns == ["0", "1"], r.stdout
    labels = tmp_path / "labels.txt"
    p = rig("plot", str(run / "rollouts" / "barge"), "-o", str(tmp_path / "t.png"),
            "--labels", str(labels))  # fmt: skip
    assert p.returncode == 0, p.stderr
    text = labels.read_text()
    assert "turn 1 start" in text and "turn 2" not in text
    yields = [line for line in text.splitlines() if line.endswith(" ms") and "yield" in line]
    assert len(yields) == 1
    start, end, _ = yields[0].split("\t")
    assert 0 < float(end) - float(start) < 1.0  # the barge-in to the system's stop
