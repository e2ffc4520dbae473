"""`rig report RUN --score ...`: scores.json at the run's top level, the text tables, --json,
--csv scores.csv, --junit suites, --html section, rig.load_run's scores table, --compare."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import rig
from rig.cli import main
from tests.support.scoringrun import mark, rollout


def _run(root: Path) -> Path:
    run = root / "run"
    rollout(run, "p1", system=[(2.4, 2.9)], marks=[mark("pause", 2.0, 3.0)],
            tags={"type": "pause", "conversation": "c1"})  # fmt: skip
    rollout(run, "p2", system=[(3.5, 4.0)], marks=[mark("pause", 2.0, 3.0)],
            tags={"type": "pause", "conversation": "c2"})  # fmt: skip
    rollout(run, "t1", system=[(5.3, 6.0)], kind="turn_taking",
            marks=[mark("turn_end", 5.0), mark("eot", 5.0)],
            timing={"turns": [{"speech_start_s": 1.0, "user_end_s": 5.0}]},
            tags={"type": "turn_taking", "conversation": "c1", "intent": "ans"})  # fmt: skip
    return run


def test_score_writes_scores_json_and_every_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    before = sorted(p.name for p in (run / "rollouts" / "p1").iterdir())
    argv = ["report", str(run), "--no-rollouts", "--by", "type", "--cluster", "conversation"]
    argv += [f"--score={n}" for n in ("pause_turn", "eot_int", "interaction",
                                       "onset_distribution")]  # fmt: skip
    argv += ["--csv", str(tmp_path / "csv"), "--junit", str(tmp_path / "j.xml")]
    argv += ["--html", str(tmp_path / "r.html"), "--html-audio", "none"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for name in ("pause_turn", "eot_int", "interaction", "onset_distribution"):
        assert f"score {name}" in text
    assert "pause_takeover_rate" in text and "type=pause" in text
    assert "95% CI" in text and "wilson" in text
    doc = json.loads((run / "scores.json").read_text())
    assert set(doc["scorers"]) == {"pause_turn", "eot_int", "interaction", "onset_distribution"}
    pt = doc["scorers"]["pause_turn"]
    assert pt["by"] == ["type"] and pt["intervals"]["cluster"] == "conversation"
    assert pt["params"] == {"shift_ms": 0.0, "bins_s": "0.8,1.0,1.5,2.5", "cap_s": 30.0}
    # recordings untouched: nothing new inside the rollouts
    assert sorted(p.name for p in (run / "rollouts" / "p1").iterdir()) == before
    rows = (tmp_path / "csv" / "scores.csv").read_text().splitlines()
    head = rows[0].split(",")
    assert head[:5] == ["scorer", "group", "variant", "metric", "value"]
    assert any(r.startswith("pause_turn,type=pause,,pause_takeover_rate,0.5,") for r in rows)
    suites = {s.get("name") for s in ET.parse(tmp_path / "j.xml").getroot()}
    assert {"rig.score.pause_turn", "rig.score.interaction"} <= suites
    assert "<h2>Scores</h2>" in (tmp_path / "r.html").read_text()
    tables = rig.load_run(run, frames=False)
    got = [r for r in tables.scores if r["metric"] == "eot_recall" and r["group"] == "all"]
    assert got[0]["value"] == 1.0 and got[0]["ci_method"] == "wilson"


def test_stored_scores_shown_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path)
    assert main(["report", str(run), "--score", "interaction", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "interaction" in out["scores"]["scorers"]
    # a plain report shows what scores.json holds, without scoring again
    assert main(["report", str(run), "--no-rollouts"]) == 0
    assert "score interaction" in capsys.readouterr().out
    # re-scoring one scorer keeps the other's entry
    assert main(["report", str(run), "--score", "pause_turn", "--json"]) == 0
    doc = json.loads((run / "scores.json").read_text())
    assert set(doc["scorers"]) == {"interaction", "pause_turn"}


def test_compare_and_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path)
    other = _run(tmp_path / "b")
    assert main(["report", str(run), "--no-rollouts", "--compare", str(other)]) == 0
    assert "JS distance" in capsys.readouterr().out
    doc = json.loads((run / "scores.json").read_text())
    assert doc["compare"]["n_items_common"] == 3
    assert doc["compare"]["groups"][0]["metrics"]["js_distance"]["value"] == 0.0
    assert main(["report", str(run), "--score", "nope"]) == 2
    assert "unknown scorer 'nope'" in capsys.readouterr().err
    assert main(["report", str(run), "--score", "eot_int", "--score-opt", "window=3"]) == 2
    assert "no parameter 'window'" in capsys.readouterr().err


def test_invalid_rollouts_need_include_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    rollout(run, "bad", system=[(2.1, 2.5)], marks=[mark("pause", 2.0, 3.0)],
            tags={"type": "pause"}, timing_valid=False)  # fmt: skip
    assert main(["report", str(run), "--no-rollouts", "--score", "pause_turn"]) == 0
    assert "1 rollout(s) with timing_valid false left out (--include-invalid)" in (
        capsys.readouterr().out.replace("\n", " ")
    )
    m = json.loads((run / "scores.json").read_text())["scorers"]["pause_turn"]
    assert m["groups"][0]["metrics"]["pause_takeover_rate"]["n"] == 2
    argv = ["report", str(run), "--no-rollouts", "--score", "pause_turn", "--include-invalid"]
    assert main(argv) == 0
    m = json.loads((run / "scores.json").read_text())["scorers"]["pause_turn"]
    assert m["groups"][0]["metrics"]["pause_takeover_rate"]["n"] == 3
    assert m["excluded"]["timing_invalid_included"] is True
