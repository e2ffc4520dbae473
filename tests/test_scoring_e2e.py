"""Scorers end to end: `rig run` against `rig sim` policies whose truth is known, then
`rig report --score ...` on the run directory.

The scenario is two synthetic items (tones stand in for speech: webrtcvad and the sim's
energy gate both take them): `pause` (1.0 s, a 1.5 s silence, 1.0 s, one turn) and `turn`
(1.0 s). Reference marks per the contract (docs/benchmarks.md) come from the known script:
the `turn.start`/`turn.end` events the session writes (their `sample` on the session
timeline) plus the file lengths: pause = [start + 1.0 s, start + 2.5 s), turn_end and eot at
each turn's end, the pause also an EOT `negative` span. `test_scenario_marks` puts them
in the scenario file (`marks`, `tags`: docs/scenarios.md) and checks what `rig run` writes
for them; the other tests append them to metrics.json and events.jsonl after a run of an
unmarked scenario, in the contract's form, so the scorers are checked on both.

Truth (rig/sim/engine.py): `always` ends a turn after 100 ms of silence and talks at once;
`never` never talks; `reply` with --endpoint-silence-ms 500 --latency-ms 200 starts 700 ms
after the user's last loud sample (plus the chunk and frame steps, a few ms on loopback).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from rig.scoring.rundir import SCORED_STATUSES
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime

RATE = 16_000
GAP_S = 1.5
SCORERS = ("pause_turn", "eot_int", "interaction", "onset_distribution")
POLICIES: dict[str, tuple[str, ...]] = {
    "always": ("--policy", "always"),
    "never": ("--policy", "never"),
    "reply": ("--endpoint-silence-ms", "500", "--latency-ms", "200", "--reply-s", "0.5"),
}

SCENARIO = """
[defaults]
pad_before_s = 0.5
max_s = 15.0
[[items]]
id = "pause"
kind = "pause"{pause_extra}
steps = [
  {{ type = "turn", files = ["{a}", "{b}"], gap_s = {gap}{pause_marks} }},
  {{ type = "drain", quiet_s = 1.0, max_s = 2.5 }},
]
[[items]]
id = "turn"
kind = "turn_taking"{turn_extra}
steps = [
  {{ type = "turn", file = "{a}"{turn_marks} }},
  {{ type = "drain", quiet_s = 1.0, max_s = 2.5 }},
]
"""


def _tone(path: Path, seconds: float, hz: float) -> None:
    t = np.arange(round(seconds * RATE)) / RATE
    sf.write(path, (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32), RATE, "PCM_16")


def _scenario(tmp: Path, with_marks: bool) -> Path:
    _tone(tmp / "a.wav", 1.0, 300.0)
    _tone(tmp / "b.wav", 1.0, 350.0)
    fields: dict[str, str] = {"pause_extra": "", "turn_extra": "", "pause_marks": "",
                              "turn_marks": ""}  # fmt: skip
    if with_marks:  # docs/scenarios.md benchmark fields: times relative to the step's audio
        end = 2.0 + GAP_S
        fields["pause_extra"] = '\ntags = { type = "pause" }'
        fields["turn_extra"] = '\ntags = { type = "turn_taking", intent = "ans" }'
        fields["pause_marks"] = (
            f', marks = [{{ kind = "pause", start_s = 1.0, end_s = {1.0 + GAP_S} }}, '
            f'{{ kind = "negative", start_s = 1.0, end_s = {1.0 + GAP_S}, label = "eot" }}, '
            f'{{ kind = "turn_end", t_s = {end} }}, {{ kind = "eot", t_s = {end} }}]'
        )
        fields["turn_marks"] = (
            ', marks = [{ kind = "turn_end", t_s = 1.0 }, { kind = "eot", t_s = 1.0 }]'
        )
    path = tmp / ("marked.toml" if with_marks else "plain.toml")
    path.write_text(SCENARIO.format(a=tmp / "a.wav", b=tmp / "b.wav", gap=GAP_S, **fields))
    return path


def _run_all(tmp: Path, scenario: Path) -> dict[str, Path]:
    """One `rig run` per policy, all at once (each against its own sim)."""
    procs = {}
    for name, knobs in POLICIES.items():
        sim, url = start_sim(*knobs)
        run = subprocess.Popen(
            [sys.executable, "-m", "rig", "run", str(scenario), "--target", url,
             "--out", str(tmp / "out"), "--run-id", name, "--headless"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        procs[name] = (sim, run)
    for sim, run in procs.values():
        try:
            out, _ = run.communicate(timeout=120)
        finally:
            stop_sim(sim)
        assert run.returncode in (0, 3), out
    runs = {name: tmp / "out" / name for name in POLICIES}
    _all_timed(runs)
    return runs


def _all_timed(runs: dict[str, Path]) -> None:
    """Every rollout's own timing held. A rollout the rig flags (`timing_valid` false: a busy
    host) is rightly left out of scoring, so the checks below could not find its group: say
    so, with the rig's reasons, instead of failing later on a missing group."""
    flagged = []
    for name, run in runs.items():
        for f in sorted((run / "rollouts").glob("*/metrics.json")):
            m = json.loads(f.read_text())
            if m.get("status") not in SCORED_STATUSES:  # not scored either
                flagged.append(f"{name}/{f.parent.name}: status {m.get('status')}")
            elif m.get("timing_valid") is False:
                reasons = (m.get("rig_timing") or {}).get("reasons")
                flagged.append(f"{name}/{f.parent.name}: {reasons}")
    assert not flagged, "rollouts left out of scoring (host busy?): " + "; ".join(flagged)


def _append_marks(run: Path) -> None:
    """The contract's marks from the script the session played (events `sample`s)."""
    for rollout in sorted((run / "rollouts").iterdir()):
        events = [json.loads(x) for x in (rollout / "events.jsonl").read_text().splitlines()]
        m = json.loads((rollout / "metrics.json").read_text())
        rate, t0 = m["sample_rate"], m["t0_ns"]
        start = next(e["sample"] for e in events if e["kind"] == "turn.start") / rate
        end = next(e["sample"] for e in events if e["kind"] == "turn.end") / rate
        marks = [("turn_end", end, None, None), ("eot", end, None, None)]
        if m["item"] == "pause":
            a, b = start + 1.0, start + 1.0 + GAP_S
            marks += [("pause", a, b, None), ("negative", a, b, "eot")]
            m["tags"] = {"type": "pause"}
        else:
            m["tags"] = {"type": "turn_taking", "intent": "ans"}
        marks.sort(key=lambda x: x[1])
        m["marks"] = [{"mark": k, "t_s": t, "end_s": e, "label": lab} for k, t, e, lab in marks]
        m["reference"] = None
        drains = [e for e in events if e["kind"] == "drain.end"]
        m["censored"] = bool(drains and drains[-1].get("timed_out"))
        lines = [
            {"kind": "mark", "t_ns": t0 + round(t * 1e9), "source": "rig", "mark": k,
             "end_ns": None if e is None else t0 + round(e * 1e9), "label": lab, "step": 0}
            for k, t, e, lab in marks
        ]  # fmt: skip
        with (rollout / "events.jsonl").open("a") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))
        (rollout / "metrics.json").write_text(json.dumps(m))


def _score(run: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "rig", "report", str(run), "--no-rollouts", "--by", "type"]
    argv += [f"--score={s}" for s in SCORERS]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for s in SCORERS:
        assert f"score {s}" in out.stdout
    doc: dict[str, Any] = json.loads((run / "scores.json").read_text())
    return doc


def _m(doc: dict[str, Any], scorer: str, **group: str) -> dict[str, Any]:
    groups = doc["scorers"][scorer]["groups"]
    metrics: dict[str, Any] = next(g for g in groups if g["group"] == group)["metrics"]
    return metrics


def _check(docs: dict[str, dict[str, Any]]) -> None:
    always, never, reply = docs["always"], docs["never"], docs["reply"]
    # always takes over every labelled pause, ~100 ms in (its 100 ms endpointer)
    t = _m(always, "pause_turn", type="pause")
    assert t["pause_takeover_rate"]["value"] == 1.0
    assert 50.0 <= t["takeover_latency_ms"]["value"] <= 250.0
    # never: every pause silent, no anchor detected, no false positive
    assert _m(never, "pause_turn", type="pause")["pause_silent_rate"]["value"] == 1.0
    e = _m(never, "eot_int")
    assert e["eot_recall"]["value"] == 0.0 and e["eot_recall"]["n"] == 2
    assert e["eot_fpr"]["value"] == 0.0 and e["eot_fpr"]["n"] == 1
    assert _m(never, "onset_distribution")["no_response_rate"]["value"] == 1.0
    assert _m(never, "interaction", type="turn_taking")["turn_taking_pass_rate"]["value"] == 0.0
    # always fires in the mid-turn pause: one false positive of one negative
    assert _m(always, "eot_int")["eot_fpr"]["value"] == 1.0
    # reply: 500 ms endpointing + 200 ms model time = 700 ms after the user's end
    r = _m(reply, "eot_int")
    assert r["eot_recall"]["value"] == 1.0 and r["eot_fpr"]["value"] == 1.0
    assert r["eot_delta_p50_ms"]["value"] == pytest.approx(700.0, abs=60.0)
    p = _m(reply, "pause_turn", type="pause")
    assert p["pause_takeover_rate"]["value"] == 1.0  # 0.7 s into a 1.5 s pause
    assert p["takeover_latency_ms"]["value"] == pytest.approx(700.0, abs=60.0)
    lat = _m(reply, "interaction", type="turn_taking")
    assert lat["turn_taking_pass_rate"]["value"] == 1.0
    assert lat["turn_taking_latency_ms"]["value"] == pytest.approx(700.0, abs=60.0)
    for doc in docs.values():
        entry = doc["scorers"]["pause_turn"]
        assert entry["basis"]["vad"] == 2 and "VAD activity" in entry["basis"]["note"]


def test_sim_policies_scored_with_marks_from_the_script(tmp_path: Path) -> None:
    runs = _run_all(tmp_path, _scenario(tmp_path, with_marks=False))
    for run in runs.values():
        _append_marks(run)
    _check({name: _score(run) for name, run in runs.items()})


def test_scenario_marks(tmp_path: Path) -> None:
    """The same, with the marks and tags in the scenario file: what `rig run` writes for
    them (events.jsonl `mark` lines and metrics.json `marks`) is what the scorers read, on
    the sample the script put them on."""
    path = _scenario(tmp_path, with_marks=True)
    runs = _run_all(tmp_path, path)
    for rollout in sorted((runs["reply"] / "rollouts").iterdir()):
        events = [json.loads(x) for x in (rollout / "events.jsonl").read_text().splitlines()]
        m = json.loads((rollout / "metrics.json").read_text())
        start = next(e["sample"] for e in events if e["kind"] == "turn.start")
        lines = [e for e in events if e["kind"] == "mark"]
        want = {"pause": ["pause", "negative", "eot", "turn_end"], "turn": ["eot", "turn_end"]}
        assert sorted(e["mark"] for e in lines) == sorted(want[m["item"]])
        assert m["tags"]["type"] == ("pause" if m["item"] == "pause" else "turn_taking")
        for e, mm in zip(lines, m["marks"], strict=True):
            offset_s = {"pause": 1.0, "negative": 1.0}.get(e["mark"])
            if offset_s is None:  # the turn's end: both files and the gap
                offset_s = 2.0 + GAP_S if m["item"] == "pause" else 1.0
            # turn.start is the turn's first audible sample: one past the tone's zero
            assert e["step"] == 0 and abs(e["sample"] - (start + round(offset_s * RATE))) <= 1
            assert mm["mark"] == e["mark"] and mm["label"] == e["label"]
            assert mm["t_s"] == pytest.approx((e["t_ns"] - m["t0_ns"]) / 1e9, abs=1e-6)
            assert abs(mm["t_s"] - e["sample"] / RATE) < 0.02  # sent on time, to the pacer
    _check({name: _score(run) for name, run in runs.items()})
