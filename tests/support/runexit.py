"""`rig run` succeeded as far as the test is concerned: exit 0, or exit 3 where every rollout
ended ok and the only complaint is the rig's own timing (timing_valid false: an overloaded
shared box, docs/pacing.md). Tests about other things use this instead of `== 0`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TIMING_FAILED = "the rig's own timing failed"


def assert_run_ok(returncode: int | None, stderr: str | None, run_dir: str | Path) -> None:
    """`stderr` None: the run was in-process (main()); the run directory alone decides."""
    if returncode == 0:
        return
    stderr = TIMING_FAILED if stderr is None else stderr
    assert returncode == 3 and TIMING_FAILED in stderr, (returncode, stderr[-3000:])
    metrics = [
        json.loads(p.read_text())
        for p in Path(run_dir).glob("rollouts/*/metrics.json")
        if ".failed-" not in p.parent.name  # earlier attempts moved aside on resume
    ]
    assert metrics, f"no rollouts in {run_dir}"
    assert all(m["status"] == "ok" for m in metrics), [m["status"] for m in metrics]
    assert any(m.get("timing_valid") is False for m in metrics), stderr[-3000:]


def assert_result_ok(result: Any) -> None:
    """The same for an API result (rig.RunResult): ok, or every rollout ok and only the rig's
    own timing flagged (its exit code is 3 then, and the reasons are in each rollout)."""
    if result.ok:
        return
    assert all(r.status == "ok" for r in result.rollouts), result.statuses
    assert result.exit_code == 3 and any(r.timing_valid is False for r in result.rollouts), (
        result.exit_code,
        result.statuses,
    )


def timing_flagged(run_dir: str | Path) -> list[str]:
    """Rollouts of a run whose own timing failed: their latencies are left out of reports, so a
    test that checks report numbers runs again (a busy shared box, not the code under test)."""
    return sorted(
        p.parent.name
        for p in Path(run_dir).glob("rollouts/*/metrics.json")
        if json.loads(p.read_text()).get("timing_valid") is False
    )
