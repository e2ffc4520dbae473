"""Baselines of the reference system (`rig sim --policy`), scored by the timing suite's
pause and turn-taking items: every metric sanity-checked against a known behaviour."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.scenarios.builtin import data_path
from rig.scenarios.fileformat import load_scenario_file
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.sim.truth import read_truth

pytestmark = pytest.mark.realtime
RATE = 16_000
FRAME_MS = 20.0  # the VAD frame: the resolution of a VAD-measured latency

SCENARIO = """
[defaults]
pad_before_s = 0.3
max_s = 12.0
drain_quiet_s = 2.0
drain_max_s = 4.0
[[items]]
id = "pause"
kind = "pause"
steps = [
  {{ type = "turn", files = ["{a}", "{b}"], gap_s = 1.5 }},
  {{ type = "drain" }},
]
[[items]]
id = "tt"
kind = "turn_taking"
steps = [{{ type = "turn", file = "{q}" }}, {{ type = "drain" }}]
"""


async def _run_all(
    tmp: Path, policies: dict[str, SimConfig]
) -> dict[str, tuple[dict[str, Any], list[Any]]]:
    """One run (one runner: one writer, one analysis worker) of both items against each
    policy's own sim: rollout `<policy>-<item>`."""
    folder = Path(data_path("timing"))
    path = tmp / "s.toml"
    path.write_text(
        SCENARIO.format(
            a=folder / "pause_a.wav", b=folder / "pause_b.wav", q=folder / "question.wav"
        )
    )
    items = load_scenario_file(str(path), RATE)
    servers = {
        n: SimServer(c, truth_log=str(tmp / f"{n}.truth.jsonl")) for n, c in policies.items()
    }
    specs = []
    try:
        for name, server in servers.items():
            url = await server.start()
            specs += [
                RolloutSpec(
                    f"{name}-{it.item_id}",
                    it.plan,
                    ws_factory(url, "rig", RATE, {}),
                    {"url": url},
                    it.meta,
                    SessionConfig(max_s=it.session["max_s"], start_lead_ms=50),
                )
                for it in items
            ]
        await Runner(str(tmp / "out"), RunnerSettings(run_id="r", concurrency=len(specs))).run(
            specs
        )
    finally:
        for server in servers.values():
            await server.stop()
    root = tmp / "out" / "r" / "rollouts"
    out = {}
    for name in policies:
        metrics = {
            it.item_id: json.loads((root / f"{name}-{it.item_id}" / "metrics.json").read_text())
            for it in items
        }
        out[name] = (metrics, read_truth(str(tmp / f"{name}.truth.jsonl")))
    return out


async def test_baseline_policies_score_as_designed(tmp_path: Path) -> None:
    policies = {
        "fixed": SimConfig(endpoint_silence_ms=500, latency_ms=400),
        "never": SimConfig(policy="never"),
        "always": SimConfig(policy="always"),
        "backchannel": SimConfig(policy="backchannel"),
    }
    res = await _run_all(tmp_path, policies)

    # fixed delay: latency X = endpoint + model latency, within one VAD frame of the truth
    m, truth = res["fixed"]
    (r,) = m["tt"]["timing"]["responses"]
    ends = [t for t in truth if t["event"] == "speech_end"]
    end = min(ends, key=lambda t: abs(t["audio_end_ns"] - r["user_end_ns"]))
    start = next(
        t
        for t in truth
        if t["event"] == "reply_start" and t["conn"] == end["conn"] and t["t_ns"] > end["t_ns"]
    )
    sent = next(
        t
        for t in truth
        if t["event"] == "reply_chunk" and t["conn"] == end["conn"] and t["t_ns"] > end["t_ns"]
    )
    # the user's end where the sim heard it in the input stream (sample k of its input is
    # sample k of user.wav: t0 + k / rate on the rig's timeline), to the reply's first chunk
    # leaving the sim (loopback: arrival)
    truth_ms = (sent["t_ns"] - m["tt"]["t0_ns"]) / 1e6 - end["audio_end_input_ms"]
    # X: endpoint (on received audio, 20 ms frames) + exactly the model latency
    assert start["t_ns"] - end["t_ns"] == 400_000_000
    assert r["latency_ms"] == pytest.approx(truth_ms, abs=FRAME_MS)
    assert m["tt"]["pass"] is True

    # never speaks: no response at all, every response rule fails
    m, truth = res["never"]
    assert not [t for t in truth if t["event"] == "reply_start"]
    assert [x["latency_ms"] for x in m["tt"]["timing"]["responses"]] == [None]
    assert m["tt"]["pass"] is False and m["tt"]["status"] == "no_audio"
    assert [x["latency_ms"] for x in m["tt"]["responses"]] == [None]
    assert m["pause"]["timing"]["system_speech_s"] == 0.0

    # always speaks: takes the turn inside the pause
    m, _ = res["always"]
    assert m["pause"]["pass"] is False
    (p,) = m["pause"]["timing"]["pauses"]
    assert p["takeover"] and p["takeover_after_ms"] < 400
    assert m["tt"]["pass"] is True  # and answers at once
    assert m["tt"]["timing"]["responses"][0]["latency_ms"] < 300

    # backchannels at every pause: short sounds, never a takeover
    m, _ = res["backchannel"]
    assert m["pause"]["pass"] is True
    assert m["pause"]["timing"]["backchannels"] and not m["pause"]["timing"]["turn_takeovers"]
    assert all(b["dur_ms"] <= 1000 for b in m["pause"]["timing"]["backchannels"])
    # by energy and VAD alone its "mhm" after the question opens a response like an answer
    # would (what word-level onsets are for: docs/metrics.md)
    assert m["tt"]["timing"]["responses"][0]["latency_ms"] is not None
