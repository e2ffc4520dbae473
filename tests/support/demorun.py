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
    """A finished run: three ok rollouts with a latency split (sim model latency 300 ms)."""
    if "demo" not in _RUNS:
        import rig

        proc, url = start_sim("--latency-ms", "300", "--endpoint-silence-ms", "300",
                              "--reply-s", "0.6")  # fmt: skip
        try:
            out = factory.mktemp("runs")
            result = rig.run("builtin:demo", target=url, out=str(out), run_id="demo",
                             concurrency=3, headless=True, max_s=30.0)  # fmt: skip
        finally:
            stop_sim(proc)
        assert result.ok, result.statuses
        _RUNS["demo"] = result.run_dir
    return _RUNS["demo"]


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
