"""Re-scoring a finished run with other rules (`rig report --rules`): a real run against the
reference system, re-analysed from its files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from rig.analysis.aggregate import aggregate, load_run
from rig.analysis.rescore import merge_rules, parse_rule_args, rescore, verdict_changes
from rig.errors import ConfigError
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.scenarios.builtin import data_path
from rig.scenarios.fileformat import load_scenario_file
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer

RATE = 16_000

SCENARIO = """
[defaults]
pad_before_s = 0.3
max_s = 25.0
drain_quiet_s = 0.8
[[items]]
id = "int"
kind = "interruption"
rules = {{ yield_max_s = 0.8 }}
steps = [
  {{ type = "turn", file = "{q}" }},
  {{ type = "inject", role = "interruption", file = "{i}", offset_s = 1.0, timeout_s = 10.0 }},
  {{ type = "drain" }},
]
[[items]]
id = "tt"
kind = "turn_taking"
steps = [{{ type = "turn", file = "{q}" }}, {{ type = "drain" }}]
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    tmp = tmp_path_factory.mktemp("rescore")
    folder = Path(data_path("timing"))
    path = tmp / "s.toml"
    path.write_text(SCENARIO.format(q=folder / "question.wav", i=folder / "interrupt.wav"))
    items = load_scenario_file(str(path), RATE)

    async def main() -> None:
        sim = SimConfig(latency_ms=300, endpoint_silence_ms=300, reply_s=3.0, yield_after_ms=150)
        server = SimServer(sim)
        url = await server.start()
        try:
            specs = [
                RolloutSpec(
                    it.item_id,
                    it.plan,
                    ws_factory(url, "rig", RATE, {}),
                    {"url": url},
                    it.meta,
                    SessionConfig(max_s=it.session["max_s"], start_lead_ms=50),
                )
                for it in items
            ]
            await Runner(str(tmp / "out"), RunnerSettings(run_id="r", concurrency=2)).run(specs)
        finally:
            await server.stop()

    asyncio.run(main())
    return tmp / "out" / "r"


@pytest.mark.realtime
def test_default_rules_reproduce_the_stored_timing_exactly(run_dir: Path) -> None:
    stored = load_run(run_dir)
    assert {r.rollout_id: r.status for r in stored.rollouts} == {"int": "ok", "tt": "ok"}
    again = rescore(stored, {})
    for before, after in zip(stored.rollouts, again.rollouts, strict=True):
        assert after.metrics["timing"] == before.metrics["timing"]
        assert after.metrics["pass"] == before.metrics["pass"]
    assert verdict_changes(stored, again) == []
    assert aggregate(again) == aggregate(stored)
    # received.wav holds every downlink sample, back to back, in chunk order
    d = run_dir / "rollouts" / "int"
    rows = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
    n_down = sum(r["n_samples"] for r in rows if r["dir"] == "down")
    assert n_down > 0 and sf.info(d / "received.wav").frames == n_down


@pytest.mark.realtime
def test_other_rules_change_the_verdicts(run_dir: Path) -> None:
    stored = load_run(run_dir)
    by_id = {r.rollout_id: r.metrics for r in stored.rollouts}
    assert by_id["int"]["pass"] is True and by_id["tt"]["pass"] is True
    strict = rescore(stored, parse_rule_args(["yield_max_s=0.05", "turn_taking_max_s=0.1"]))
    new = {r.rollout_id: r.metrics for r in strict.rollouts}
    assert new["int"]["pass"] is False and new["tt"]["pass"] is False
    assert new["int"]["timing"]["params"]["yield_max_s"] == 0.05
    assert sorted(verdict_changes(stored, strict)) == [
        "int: pass True -> False",
        "tt: pass True -> False",
    ]
    # the yield itself does not depend on the window: same number, other verdict
    (y0,) = by_id["int"]["timing"]["yields"]
    (y1,) = new["int"]["timing"]["yields"]
    assert y1["yield_ms"] == y0["yield_ms"]
    by_ack = rescore(stored, parse_rule_args(["yield_from=ack"]))
    (ya,) = next(r for r in by_ack.rollouts if r.rollout_id == "int").metrics["timing"]["yields"]
    assert ya["yield_from"] == "ack" and ya["yield_ms"] == y0["ack"]["yield_ms"]
    # the VAD is a rule too: a longer hangover moves segment ends
    vad = rescore(stored, parse_rule_args(["activity.hangover_ms=600"]))
    t = next(r for r in vad.rollouts if r.rollout_id == "tt").metrics["timing"]
    assert t["params"]["activity"]["hangover_ms"] == 600
    assert t["params"]["turn_taking_max_s"] == 2.0  # the stored rules stay


@pytest.mark.realtime
def test_rig_report_rules_cli(run_dir: Path) -> None:
    cmd = [sys.executable, "-m", "rig", "report", str(run_dir)]
    r = subprocess.run([*cmd, "--json", "--rules", "yield_max_s=0.05"], capture_output=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["rescored"]["rules"] == {"yield_max_s": 0.05}
    assert rep["rescored"]["verdict_changes"] == ["int: pass True -> False"]
    assert {m["rollout_id"]: m["pass"] for m in rep["rollouts"]} == {"int": False, "tt": True}
    text = subprocess.run([*cmd, "--rules", "yield_max_s=0.05"], capture_output=True, text=True)
    assert text.returncode == 0 and "re-scored with yield_max_s=0.05" in text.stdout
    bad = subprocess.run([*cmd, "--rules", "nope=1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown timing rule" in bad.stderr
    # nothing was rewritten
    stored = json.loads((run_dir / "rollouts" / "int" / "metrics.json").read_text())
    assert stored["pass"] is True


def test_rule_arguments() -> None:
    assert parse_rule_args(["yield_max_s=0.5", "yield_from=ack", "activity.frame_ms=30"]) == {
        "yield_max_s": 0.5,
        "yield_from": "ack",
        "activity": {"frame_ms": 30},
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_rule_args(["yield_max_s"])
    with pytest.raises(ConfigError, match="unknown timing rule"):
        parse_rule_args(["yield_max=1"])
    with pytest.raises(ConfigError, match="yield_from"):
        parse_rule_args(["yield_from=truncated"])
    with pytest.raises(ConfigError, match="frame_ms"):
        parse_rule_args(["activity.frame_ms=25"])
    merged = merge_rules(
        {"yield_max_s": 0.7, "activity": {"hangover_ms": 100}}, {"activity": {"frame_ms": 30}}
    )
    assert merged == {"yield_max_s": 0.7, "activity": {"hangover_ms": 100, "frame_ms": 30}}
