"""A rollout whose analysis fails is `analysis_error`: not ok, exit 3, redone on resume.

Two real failures against `rig sim`: the analysis worker SIGKILLed while it holds the first
rollout's analysis, and an ASR model that does not exist (the analysis raises in the worker).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rig
from rig.childproc import AnalysisWorker
from rig.cli import main
from rig.runs import runner as runner_mod
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime

WAV = str(Path(rig.__file__).parent / "data" / "turn_what.wav")


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    proc, url = start_sim("--latency-ms", "200", "--endpoint-silence-ms", "300", "--reply-s", "0.4")
    try:
        yield url
    finally:
        stop_sim(proc)


class _KillOnFirstAnalysis(AnalysisWorker):
    """The real worker, SIGKILLed the moment the first rollout's analysis is handed to it."""

    killed: list[int] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        fut = super().submit(fn, *args, **kwargs)
        if not _KillOnFirstAnalysis.killed and "finish_rollout" in repr(fn):
            while self.pid is None:  # started by the warm-up already; never long
                pass
            os.kill(self.pid, signal.SIGKILL)
            _KillOnFirstAnalysis.killed.append(self.pid)
        return fut


def _metrics(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {
        p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("rollouts/*/metrics.json")
    }


def test_worker_killed_mid_analysis(
    sim_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(runner_mod, "analysis_pool", _KillOnFirstAnalysis)
    _KillOnFirstAnalysis.killed.clear()
    argv = ["run", "builtin:demo", "--target", sim_url, "--out", str(tmp_path),
            "--run-id", "r", "--headless", "--max-s", "20"]  # fmt: skip
    code = main(argv)
    err = capsys.readouterr().err
    assert _KillOnFirstAnalysis.killed
    run_dir = tmp_path / "r"
    ms = _metrics(run_dir)
    bad = {rid: m for rid, m in ms.items() if m["status"] == "analysis_error"}
    assert len(bad) == 1, {rid: m["status"] for rid, m in ms.items()}
    ((rid, m),) = bad.items()
    assert "analysis failed" in m["reason"] and "BrokenProcessPool" in m["reason"], m["reason"]
    assert "SIGKILL" in m["reason"] and m["session_status"] == "ok" and m["pass"] is None
    # the other rollouts got a fresh worker and their analysis
    for other, om in ms.items():
        if other != rid:
            assert om["status"] == "ok" and "error" not in om["timing"], om.get("reason")
    assert code == 3
    assert err.rstrip().splitlines()[-1].startswith("rig run: exit 3: 1 rollout analysis_error")
    result = rig.RunResult.from_dir(run_dir)
    assert not result.ok and result.exit_code == 3
    assert result[rid].why is not None and result[rid].why.startswith("analysis_error: ")
    assert f"{rid}: analysis_error: analysis failed" in result.why
    assert "1 rollout analysis_error" in str(result)

    # resume: the same command redoes that rollout (the failed attempt moved aside)
    monkeypatch.setattr(runner_mod, "analysis_pool", AnalysisWorker)
    code = main(argv)
    capsys.readouterr()
    ms = _metrics(run_dir)
    assert ms[rid]["status"] == "ok" and "error" not in ms[rid]["timing"]
    assert (run_dir / "rollouts" / f"{rid}.failed-1" / "metrics.json").is_file()
    assert code in (0, 3)  # 3 only for the rig's own timing on a loaded box
    if code == 3:
        assert all(m["status"] == "ok" for m in ms.values())


def test_analysis_that_raises_is_analysis_error(sim_url: str, tmp_path: Path) -> None:
    """An ASR model path that does not exist: the worker's analysis raises; the rollout is
    not ok and says why (and its latencies are still there)."""
    pytest.importorskip("faster_whisper")
    result = rig.run(
        WAV, target=sim_url, out=str(tmp_path), run_id="asr", headless=True, max_s=20.0,
        asr_model=str(tmp_path / "no-such-model"),
    )  # fmt: skip
    assert not result.ok and result.exit_code == 3
    (r,) = result.rollouts
    assert r.status == "analysis_error", (r.status, r.reason)
    assert r.reason is not None and r.reason.startswith("analysis failed: asr: ")
    assert r.latencies_ms  # the stream's own measures are kept
    assert "1 rollout analysis_error" in result.why.splitlines()[0]
