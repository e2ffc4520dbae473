"""What `rig.run` returns: the run directory and, per rollout, status, responses and verdicts.

Built from the run directory after the run (the same files `rig report` reads), so a result
is the same whether the run just happened or is loaded later (`RunResult.from_dir`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig.analysis.rollout import read_json
from rig.analysis.tables import RunTables, load_tables
from rig.reporting.summary import load_rollouts
from rig.reporting.why import exit_line, rollout_why, why_text
from rig.status import exit_verdict, is_ok


@dataclass(frozen=True)
class RolloutResult:
    """One rollout: its status, its responses (latency and split per user turn) and the
    timing verdicts (`passed`: the item's rule; `timing_valid`: did the rig's own timing hold,
    None when the run did not record it)."""

    rollout_id: str
    status: str
    reason: str | None
    responses: list[dict[str, Any]]
    passed: bool | None
    timing_valid: bool | None
    rollout_dir: Path
    metrics: dict[str, Any] = field(repr=False)

    @property
    def ok(self) -> bool:
        return is_ok(self.status)

    @property
    def why(self) -> str | None:
        """One line: why this rollout is not ok (its status and reason, or the timing flag
        on the rig's own timing), None when it is ok."""
        return rollout_why(self.metrics)

    @property
    def latencies_ms(self) -> list[float]:
        """Response latency per answered user turn, ms (the playback clock)."""
        return [
            float(r["latency_ms"])
            for r in self.responses
            if isinstance(r.get("latency_ms"), int | float)
        ]

    @classmethod
    def from_metrics(cls, run_dir: Path, m: dict[str, Any]) -> RolloutResult:
        rid = str(m.get("rollout_id"))
        responses = m.get("responses")
        passed = m.get("pass")
        if passed is None and isinstance(m.get("timing"), dict):
            passed = m["timing"].get("pass")
        valid = m.get("timing_valid")
        return cls(
            rollout_id=rid,
            status=str(m.get("status", "unknown")),
            reason=str(m["reason"]) if m.get("reason") is not None else None,
            responses=[r for r in responses if isinstance(r, dict)]
            if isinstance(responses, list)
            else [],
            passed=passed if isinstance(passed, bool) else None,
            timing_valid=valid if isinstance(valid, bool) else None,
            rollout_dir=run_dir / "rollouts" / rid,
            metrics=m,
        )


@dataclass(frozen=True)
class RunResult:
    """A finished run: `ok` when every rollout is ok, none says the rig's own timing failed
    (`timing_valid` false: its numbers cannot be trusted) and the run was not stopped early."""

    run_id: str
    run_dir: Path
    rollouts: list[RolloutResult]
    stop_reason: str | None = None
    manifest: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        """What `rig run` exits with for this run: 0 ok, 3 a rollout not ok, its timing not
        valid, or the run stopped early (rig.status.exit_verdict)."""
        return exit_verdict(
            (r.status for r in self.rollouts),
            timing_valid=(r.timing_valid for r in self.rollouts),
            stopped=self.stop_reason is not None,
        )

    @property
    def why(self) -> str:
        """Why the run is not ok: the causes of its exit code on the first line, then one
        line per rollout that is not ok with its reason ("" when the run is ok). Made for
        `assert result.ok, result.why`."""
        return why_text(self._metrics(), stop_reason=self.stop_reason)

    def __str__(self) -> str:
        line = exit_line(self.exit_code, self._metrics(), stop_reason=self.stop_reason)
        head = f"run {self.run_id}: {line}"
        why = self.why
        return head if not why else head + "\n" + "\n".join(why.splitlines()[1:])

    def _metrics(self) -> list[dict[str, Any]]:
        return [
            {**r.metrics, "rollout_id": r.rollout_id, "status": r.status} for r in self.rollouts
        ]

    @property
    def statuses(self) -> dict[str, str]:
        return {r.rollout_id: r.status for r in self.rollouts}

    @property
    def latencies_ms(self) -> list[float]:
        return [x for r in self.rollouts for x in r.latencies_ms]

    def __getitem__(self, rollout_id: str) -> RolloutResult:
        for r in self.rollouts:
            if r.rollout_id == rollout_id:
                return r
        raise KeyError(rollout_id)

    def tables(self) -> RunTables:
        """The run as tidy tables (rig.load_run)."""
        return load_tables(self.run_dir)

    @classmethod
    def from_dir(cls, run_dir: str | Path, stop_reason: str | None = None) -> RunResult:
        root = Path(run_dir)
        manifest = read_json(root / "manifest.json")
        if stop_reason is None and manifest is not None and manifest.get("stop_reason"):
            stop_reason = str(manifest["stop_reason"])
        rollouts = [RolloutResult.from_metrics(root, m) for m in load_rollouts(str(root))]
        run_id = manifest.get("run_id") if manifest else None
        return cls(
            run_id=str(run_id or root.name),
            run_dir=root,
            rollouts=rollouts,
            stop_reason=stop_reason,
            manifest=manifest,
        )
