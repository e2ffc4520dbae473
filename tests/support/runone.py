"""One `rig run` of rig/data/turn_what.wav against a target, as a subprocess: the end-to-end
tests' common case (headless, a short drain), returning what they check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple


class OneRun(NamedTuple):
    returncode: int
    metrics: dict[str, Any]  # the rollout's metrics.json ({} when it was not written)
    run_dir: Path
    stderr: str


def run_turn_what(tmp_path: Path, url: str, *extra: str, timeout_s: float = 60) -> OneRun:
    out = tmp_path / "out"
    wav = os.path.join("rig", "data", "turn_what.wav")
    r = subprocess.run(
        [sys.executable, "-m", "rig", "run", wav, "--target", url, "--out", str(out),
         "--run-id", "run", "--headless", "--drain-quiet-s", "0.8", *extra],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )  # fmt: skip
    path = out / "run" / "rollouts" / "turn_what" / "metrics.json"
    metrics = json.loads(path.read_text()) if path.exists() else {}
    return OneRun(r.returncode, metrics, out / "run", r.stderr)
