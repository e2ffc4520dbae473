"""Resume and reports (issue #15 row 10): attempts moved aside are retries, not rollouts, and
a resume with a different configuration is refused unless forced (then recorded)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rig.analysis.aggregate import aggregate, load_run
from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.errors import ConfigError
from rig.reporting.summary import load_rollouts
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.sim.thread import SimThread
from rig.transports.websocket import WebSocketTransport


def _write(d: Path, metrics: dict[str, object]) -> None:
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps(metrics))


def test_failed_attempts_are_retries_not_rollouts(tmp_path) -> None:
    run = tmp_path / "run"
    ok = {"status": "ok", "responses": [{"latency_ms": 500.0}], "item": "a"}
    _write(run / "rollouts" / "a", ok)
    _write(run / "rollouts" / "a.failed-1", {"status": "transport_error", "item": "a"})
    (run / "rollouts" / "a.failed-2").mkdir()  # killed before metrics.json
    _write(run / "rollouts" / "b", {**ok, "item": "b"})
    _write(run / "rollouts" / "not.failed-x", {**ok, "item": "c"})  # not an attempt name
    data = load_run(run)
    assert sorted(r.rollout_id for r in data.rollouts) == ["a", "b", "not.failed-x"]
    assert {r.rollout_id: r.retries for r in data.rollouts} == {"a": 2, "b": 0, "not.failed-x": 0}
    report = aggregate(run)
    assert report["n_rollouts"] == 3
    assert report["status_counts"] == {"ok": 3}
    assert report["retries"] == {"a": 2}
    assert {m["rollout_id"]: m.get("retries", 0) for m in load_rollouts(str(run))}["a"] == 2


def _spec(url: str, target: dict[str, object], max_s: float = 10.0) -> RolloutSpec:
    plan = PlanBuilder(16_000).add_silence(0.1).add_turn(tone(300, 0.4, 16_000)).add_silence(0.3)

    def make(clock, gate):  # type: ignore[no-untyped-def]
        return WebSocketTransport(url, RawPcmDialect(16_000), clock, open_gate=gate)

    return RolloutSpec(
        "r", plan.build(), make, target, {}, SessionConfig(drain_quiet_s=0.3, max_s=max_s)
    )


@pytest.mark.realtime
async def test_resume_with_a_changed_config_is_refused_unless_forced(tmp_path) -> None:
    sim = SimThread(SimServer(SimConfig(latency_ms=50, endpoint_silence_ms=200, reply_s=0.3)))
    url = await asyncio.to_thread(sim.start)
    out = str(tmp_path)
    try:
        first = await Runner(
            out, RunnerSettings(run_id="x", config={"scenario": "s1"}, analyze=False)
        ).run([_spec(url, {"url": "ws://a/"})])
        assert first["status_counts"] == {"ok": 1}
        manifest_path = tmp_path / "x" / "manifest.json"
        before = manifest_path.read_text()
        # the same config resumes (nothing to redo)
        same = await Runner(
            out, RunnerSettings(run_id="x", config={"scenario": "s1"}, analyze=False)
        ).run([_spec(url, {"url": "ws://a/"})])
        assert same["status_counts"] == {"ok": 1}
        # another target, or another setting that shapes results: refused, nothing touched
        for target, config in (
            ({"url": "ws://b/"}, {"scenario": "s1"}),
            ({"url": "ws://a/"}, {"scenario": "s2"}),
        ):
            with pytest.raises(ConfigError, match="different configuration"):
                await Runner(out, RunnerSettings(run_id="x", config=config, analyze=False)).run(
                    [_spec(url, target)]
                )
        assert json.loads(manifest_path.read_text())["targets"] == [{"url": "ws://a/"}]
        assert json.loads(manifest_path.read_text())["status"] == "done"
        assert before != ""
        # operational settings (concurrency) are not part of what must match
        await Runner(
            out, RunnerSettings(run_id="x", config={"scenario": "s1"}, concurrency=4, analyze=False)
        ).run([_spec(url, {"url": "ws://a/"})])
        # forced: it runs and the manifest records what changed
        forced = await Runner(
            out,
            RunnerSettings(run_id="x", config={"scenario": "s2"}, analyze=False, force_resume=True),
        ).run([_spec(url, {"url": "ws://b/"})])
        assert forced["status_counts"] == {"ok": 1}
    finally:
        await asyncio.to_thread(sim.stop)
    m = json.loads(manifest_path.read_text())
    assert m["resumed_from"]["forced"] is True
    changed = {c["field"] for c in m["resumed_from"]["changes"]}
    assert changed == {"targets", "config.scenario"}
    assert {"url": "ws://a/"} in m["targets"] and {"url": "ws://b/"} in m["targets"]
