"""One real run directory for the report-side tests: builtin:demo against `rig sim`, made
once per test session (rig.run), and copies of it with rollouts broken on purpose."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.simproc import start_sim, stop_sim

_RUNS: dict[str, Path] = {}


def demo_run(factory: pytest.TempPathFactory) -> Path:
    """A finished run: three ok rollouts with a latency split (sim model latency 300 ms).

    The report-side tests need a run whose own timing held (an invalid rollout leaves the
    aggregates and fails the gates by design), so a run the rig flagged for its own timing (a
    loaded shared box) is made again, up to three times; each flagged attempt's reasons are
    kept for the failure message."""
    if "demo" not in _RUNS:
        import rig

        flagged: list[str] = []
        for attempt in range(3):
            proc, url = start_sim("--latency-ms", "300", "--endpoint-silence-ms", "300",
                                  "--reply-s", "0.6")  # fmt: skip
            try:
                out = factory.mktemp("runs")
                result = rig.run("builtin:demo", target=url, out=str(out), run_id="demo",
                                 concurrency=3, headless=True, max_s=30.0)  # fmt: skip
            finally:
                stop_sim(proc)
            assert set(result.statuses.values()) == {"ok"}, result.statuses
            if result.ok:
                _RUNS["demo"] = result.run_dir
                break
            flagged += [f"attempt {attempt}: {_timing_reasons(result.run_dir)}"]
        else:
            pytest.fail(f"the rig's own timing failed in every attempt: {flagged}")
    return _RUNS["demo"]


def _timing_reasons(run: Path) -> dict[str, Any]:
    return {
        p.parent.name: json.loads(p.read_text()).get("rig_timing", {}).get("reasons")
        for p in run.glob("rollouts/*/metrics.json")
    }


def broken_copy(run: Path, dest: Path) -> Path:
    """The run with `recipe` ended by a connection error and `weather` failing its rule."""
    shutil.copytree(run, dest)

    def edit(rid: str, **changes: Any) -> None:
        path = dest / "rollouts" / rid / "metrics.json"
        m = json.loads(path.read_text())
        m.update(changes)
        if "pass" in changes:
            m["timing"]["pass"] = changes["pass"]
            m["timing"]["rule"] = "turn_taking: every turn answered within 0.5 s <&>"
        path.write_text(json.dumps(m))

    edit("recipe", status="error", reason="TransportError: connection refused", responses=[])
    edit("weather", **{"pass": False})
    return dest
