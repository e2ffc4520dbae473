"""rig.reporting.why: one line per rollout that is not ok, and the reason for the exit code."""

from __future__ import annotations

from pathlib import Path

from rig.api.result import RolloutResult, RunResult
from rig.reporting.why import exit_line, rollout_why, why_text

FLAGGED = {"rig_timing": {"reasons": ["loop lag p99 14 ms (> 5 ms)"]}, "timing_valid": False}


def _rollouts() -> list[dict[str, object]]:
    return [
        {"rollout_id": "a", "status": "ok", "timing_valid": True},
        {"rollout_id": "b", "status": "ok", **FLAGGED},
        {"rollout_id": "c", "status": "ok", **FLAGGED},
        {"rollout_id": "d", "status": "analysis_error", "reason": "analysis failed: boom"},
    ]


def test_rollout_reasons() -> None:
    a, b, _, d = _rollouts()
    assert rollout_why(a) is None
    assert rollout_why(b) == "flagged for the rig's own timing (loop lag p99 14 ms (> 5 ms))"
    assert rollout_why(d) == "analysis_error: analysis failed: boom"
    assert rollout_why({"status": "timed_out"}) == "timed_out"


def test_exit_line_names_every_cause() -> None:
    rs = _rollouts()
    assert exit_line(3, rs) == (
        "exit 3: 1 rollout analysis_error; 2 rollouts flagged for the rig's own timing "
        "(ask for fewer at once)"
    )
    assert exit_line(3, rs[:2]) == (
        "exit 3: 1 rollout flagged for the rig's own timing (ask for fewer at once)"
    )
    assert exit_line(0, rs[:1]) == "exit 0: 1 rollout ok"
    assert exit_line(3, rs[:1], stop_reason="the disk is full") == (
        "exit 3: the run stopped early (the disk is full)"
    )
    assert exit_line(0, rs[:1] * 2) == "exit 0: all 2 rollouts ok"
    assert exit_line(3, rs[:1], expected=3) == "exit 3: 2 rollouts never finished"


def test_why_text_and_the_run_result(tmp_path: Path) -> None:
    rs = _rollouts()
    text = why_text(rs)
    assert text.splitlines() == [
        "1 rollout analysis_error; 2 rollouts flagged for the rig's own timing "
        "(ask for fewer at once)",
        "b: flagged for the rig's own timing (loop lag p99 14 ms (> 5 ms))",
        "c: flagged for the rig's own timing (loop lag p99 14 ms (> 5 ms))",
        "d: analysis_error: analysis failed: boom",
    ]
    assert why_text(rs[:1]) == ""
    result = RunResult("r1", tmp_path, [RolloutResult.from_metrics(tmp_path, m) for m in rs])
    assert not result.ok and result.why == text
    assert str(result).splitlines()[0] == (
        "run r1: exit 3: 1 rollout analysis_error; 2 rollouts flagged for the rig's own timing "
        "(ask for fewer at once)"
    )
    assert str(result).splitlines()[1:] == text.splitlines()[1:]
    assert result["b"].why is not None and result["a"].why is None
    ok = RunResult("r2", tmp_path, [RolloutResult.from_metrics(tmp_path, rs[0])])
    assert ok.ok and ok.why == "" and str(ok) == "run r2: exit 0: 1 rollout ok"
