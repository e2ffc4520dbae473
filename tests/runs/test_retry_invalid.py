"""`--retry-invalid N`: a rollout whose own timing failed is run again, its attempt kept.

The stall is real: the first attempt's transport factory blocks the event loop for 80 ms
while frames are due (every stream on it is then several frames late, the pacer's stall),
against a real reference system over loopback WebSocket. What must hold: the invalid
attempt is kept beside as `<id>.failed-1` with its verdict, the rollout's own directory holds
the valid attempt, the manifest says what was retried, readers count the attempt as a retry
and not as a rollout, and a resume with N > 0 redoes rollouts recorded invalid before.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from rig.analysis.aggregate import load_run
from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.sim.thread import SimThread
from rig.transports.websocket import WebSocketTransport

pytestmark = pytest.mark.realtime
BLOCK_S = 0.08  # four frames: a stall however the phases fall


def _spec(url: str, stalled_attempts: set[int]) -> tuple[RolloutSpec, list[int]]:
    """A short turn; attempts (1-based) in `stalled_attempts` block the loop mid-stream."""
    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 0.6, 16_000)).add_silence(0.2)
    made: list[int] = []

    def make(clock, gate):  # type: ignore[no-untyped-def]
        made.append(len(made) + 1)
        if made[-1] in stalled_attempts:
            asyncio.get_running_loop().call_later(0.35, time.sleep, BLOCK_S)
        return WebSocketTransport(url, RawPcmDialect(16_000), clock, open_gate=gate)

    cfg = SessionConfig(drain_quiet_s=0.3, max_s=10.0)
    return RolloutSpec("r", plan.build(), make, {"url": "ws://sim/"}, {}, cfg), made


async def _run(out: Path, spec: RolloutSpec, retry: int) -> dict[str, Any]:
    settings = RunnerSettings(run_id="x", analyze=False, retry_invalid=retry)
    return await Runner(str(out), settings).run([spec])


def _metrics(d: Path) -> dict[str, Any]:
    return json.loads((d / "metrics.json").read_text())


@pytest.fixture
async def sim_url():  # type: ignore[no-untyped-def]
    sim = SimThread(SimServer(SimConfig(latency_ms=50, endpoint_silence_ms=200, reply_s=0.3)))
    url = await asyncio.to_thread(sim.start)
    try:
        yield url
    finally:
        await asyncio.to_thread(sim.stop)


async def test_a_stalled_attempt_is_kept_beside_and_the_rollout_run_again(
    tmp_path: Path, sim_url: str
) -> None:
    spec, made = _spec(sim_url, {1})
    result = await _run(tmp_path, spec, retry=2)
    # the second attempt holds; a third only if this machine itself stalled the second
    assert made[:2] == [1, 2] and len(made) <= 3
    rollouts = tmp_path / "x" / "rollouts"
    first = _metrics(rollouts / "r.failed-1")
    assert first["status"] == "ok" and first["timing_valid"] is False
    assert any("stalled frame" in why for why in first["rig_timing"]["reasons"])
    final = _metrics(rollouts / "r")
    assert final["timing_valid"] is True, final["rig_timing"]["reasons"]
    assert result["results"]["r"]["timing_valid"] is True
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["config"]["retry_invalid"] == 2
    assert manifest["retried_invalid"] == {"r": len(made) - 1}
    assert manifest["timing_invalid"] == []
    data = load_run(tmp_path / "x")
    assert [(r.rollout_id, r.retries) for r in data.rollouts] == [("r", len(made) - 1)]


async def test_without_retries_the_invalid_attempt_stands_and_a_resume_with_them_redoes_it(
    tmp_path: Path, sim_url: str
) -> None:
    spec, made = _spec(sim_url, {1})
    first = await _run(tmp_path, spec, retry=0)
    assert made == [1] and first["results"]["r"]["timing_valid"] is False
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["timing_invalid"] == ["r"] and manifest["retried_invalid"] == {}
    # a plain resume keeps it (its conversation finished ok: the numbers are flagged, not lost)
    await _run(tmp_path, spec, retry=0)
    assert made == [1]
    # a resume that allows retries runs it again (the redo is the first retry); the invalid
    # attempt is kept beside
    again = await _run(tmp_path, spec, retry=3)
    assert made[:2] == [1, 2] and len(made) <= 3  # a third only if the machine stalled one
    assert again["results"]["r"]["timing_valid"] is True
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["retried_invalid"] == {"r": len(made) - 1}
    assert _metrics(tmp_path / "x" / "rollouts" / "r.failed-1")["timing_valid"] is False
    # valid now: nothing more to redo
    n = len(made)
    await _run(tmp_path, spec, retry=3)
    assert len(made) == n


async def test_a_resumes_redo_counts_against_n(tmp_path: Path, sim_url: str) -> None:
    spec, made = _spec(sim_url, {1, 2, 3})
    await _run(tmp_path, spec, retry=0)
    again = await _run(tmp_path, spec, retry=1)  # the redo is the one retry N allows
    assert made == [1, 2] and again["results"]["r"]["timing_valid"] is False
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["retried_invalid"] == {"r": 1}


async def test_retries_stop_at_n_and_the_last_verdict_is_the_rollouts(
    tmp_path: Path, sim_url: str
) -> None:
    spec, made = _spec(sim_url, {1, 2, 3})
    result = await _run(tmp_path, spec, retry=1)
    assert made == [1, 2]  # one retry allowed, both attempts stalled
    assert result["results"]["r"]["timing_valid"] is False
    rollouts = tmp_path / "x" / "rollouts"
    assert sorted(p.name for p in rollouts.iterdir()) == ["r", "r.failed-1"]
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["timing_invalid"] == ["r"] and manifest["retried_invalid"] == {"r": 1}
    # a resume with the same N: the attempt already beside uses it up
    await _run(tmp_path, spec, retry=1)
    assert made == [1, 2]
