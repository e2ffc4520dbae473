"""Scenario files: parsing, validation errors, the built-in suites, and policies end to end
against the reference system (in-process SimServer, real time)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.audio.source import tone
from rig.core.director import Drain, Pause, Play, WaitOnset, WaitQuiet
from rig.errors import ScenarioError
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.scenarios import resolve
from rig.scenarios.builtin import data_path
from rig.scenarios.fileformat import load_scenario_file
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer

RATE = 16_000


def wav(dir_: Path, name: str, seconds: float, freq: float = 300.0, rate: int = RATE) -> str:
    path = dir_ / name
    sf.write(path, tone(freq, seconds, rate).pcm, rate, subtype="PCM_16")
    return name


GOOD = """
[suite]
name = "mine"
[defaults]
pad_before_s = 0.25
max_s = 30
drain_quiet_s = 1.0
rules = { turn_taking_max_s = 1.5 }

[[items]]
id = "q1"
kind = "interruption"
history_text = "we talked about trains"
prefill = "hist.wav"
rules = { yield_max_s = 0.7 }
steps = [
  { type = "turn", files = ["a.wav", "b.wav"], gap_s = 0.5, pad_after_s = 0.1 },
  { type = "release", quiet_s = 0.8, timeout_s = 9 },
  { type = "turn", file = "a.wav", label = "again", pad_before_s = 0 },
  { type = "inject", role = "interruption", file = "b.wav", offset_s = 1.0, timeout_s = 5 },
  { type = "inject", role = "backchannel", file = "a.wav", after_s = 0.3 },
  { type = "pause", seconds = 0.2 },
]

[[items]]
id = "q2"
steps = [{ type = "turn", file = "a.wav" }, { type = "drain", quiet_s = 0.5, max_s = 4 }]
"""


@pytest.fixture
def audio_dir(tmp_path: Path) -> Path:
    wav(tmp_path, "a.wav", 0.4)
    wav(tmp_path, "b.wav", 0.3, 500)
    wav(tmp_path, "hist.wav", 0.2, 200, rate=8000)  # resampled on load
    return tmp_path


def test_good_file_maps_steps_one_to_one(audio_dir: Path) -> None:
    path = audio_dir / "s.toml"
    path.write_text(GOOD)
    q1, q2 = load_scenario_file(str(path), RATE)
    types = [type(s).__name__ for s in q1.plan.steps or []]
    assert types == [
        "Play",  # prefill
        "Pause",  # pad_before 0.25
        "Play",  # a + 0.5 s + b, one turn
        "Pause",  # pad_after 0.1
        "WaitQuiet",
        "Play",  # again (pad_before 0)
        "WaitOnset",
        "Play",
        "Pause",  # after_s
        "Play",
        "Pause",
        "Drain",  # appended from defaults
    ]
    steps = q1.plan.steps or []
    assert isinstance(steps[0], Play) and steps[0].role == "prefill" and not steps[0].barge_in
    assert len(steps[0].pcm) == round(0.2 * RATE)
    assert isinstance(steps[2], Play) and len(steps[2].pcm) == round(1.2 * RATE)
    assert steps[2].label == "a" and steps[2].role == "turn"
    assert steps[4] == WaitQuiet(0.8, 9.0)
    assert steps[6] == WaitOnset(1.0, 5.0)
    assert isinstance(steps[7], Play) and steps[7].role == "interruption" and steps[7].barge_in
    assert steps[8] == Pause(0.3)
    assert isinstance(steps[9], Play) and steps[9].role == "backchannel" and not steps[9].barge_in
    assert steps[-1] == Drain(1.0, 30.0)
    assert q1.meta == {
        "scenario": "mine",
        "item": "q1",
        "kind": "interruption",
        "rules": {"turn_taking_max_s": 1.5, "yield_max_s": 0.7},
        "max_s": 30.0,
        "history": [{"role": "user", "text": "we talked about trains"}],
        "prefill_speed": 4.0,
    }
    assert q1.session == {"max_s": 30.0, "prefill_speed": 4.0}
    assert q2.meta["kind"] == "free" and (q2.plan.steps or [])[-1] == Drain(0.5, 4.0)
    described = q1.plan.describe()["steps"]
    assert described[6] == {"type": "WaitOnset", "offset_s": 1.0, "timeout_s": 5.0}
    assert described[2]["duration_s"] == 1.2 and described[2]["label"] == "a"


def test_json_with_the_same_structure_gives_the_same_items(audio_dir: Path) -> None:
    import tomllib

    (audio_dir / "s.toml").write_text(GOOD)
    (audio_dir / "s.json").write_text(json.dumps(tomllib.loads(GOOD)))
    a = load_scenario_file(str(audio_dir / "s.toml"), RATE)
    b = load_scenario_file(str(audio_dir / "s.json"), RATE)
    assert [i.meta for i in a] == [i.meta for i in b]
    assert [i.plan.describe() for i in a] == [i.plan.describe() for i in b]


BAD = [
    ("colour = 1", "", "colour", "unknown key"),
    ("[defaults]\nmax_s = -3", "", "defaults.max_s", "> 0"),
    ("[defaults]\npad_before_s = 'x'", "", "defaults.pad_before_s", "must be a number"),
    (
        "",
        "id = 'x'\nsteps = [{type='turn', file='a.wav', speed=2}]",
        "items[0].steps[0].speed",
        "unknown key",
    ),
    (
        "",
        "id = 'x'\nsteps = [{type='turn', file='missing.wav'}]",
        "items[0].steps[0].file",
        "not found",
    ),
    ("", "id = 'x'\nsteps = [{type='pause', seconds=-1}]", "items[0].steps[0].seconds", ">"),
    ("", "id = 'x'\nsteps = [{type='fly'}]", "items[0].steps[0].type", "one of"),
    ("", "id = 'x'\nkind = 'chat'\nsteps = [{type='pause', seconds=1}]", "items[0].kind", "one of"),
    (
        "",
        "id = 'x'\nsteps = [{type='inject', role='interruption', file='a.wav'}]",
        "items[0].steps[0]",
        "offset_s",
    ),
    (
        "",
        "id = 'x'\nsteps = [{type='inject', role='cough', file='a.wav', offset_s=1}]",
        "items[0].steps[0].role",
        "one of",
    ),
    (
        "",
        "id = 'x'\nsteps = [{type='turn', file='a.wav', files=['a.wav']}]",
        "items[0].steps[0]",
        "exactly one",
    ),
    (
        "",
        "id = 'x'\nsteps = [{type='release', quiet_s=1, timeout_s=0}]",
        "items[0].steps[0].timeout_s",
        "> 0",
    ),
    ("", "id = 'x'\nsteps = []", "items[0].steps", "non-empty"),
    ("", "steps = [{type='pause', seconds=1}]", "items[0].id", "required"),
    ("", "id = 'x y'\nsteps = [{type='pause', seconds=1}]", "items[0].id", "letters"),
    (
        "",
        "id = 'x'\nrules = { nope = 1 }\nsteps = [{type='pause', seconds=1}]",
        "items[0].rules.nope",
        "unknown key",
    ),
    (
        "",
        "id = 'x'\nprefill = 3\nsteps = [{type='pause', seconds=1}]",
        "items[0].prefill",
        "audio file path",
    ),
    (
        "",
        "id = 'x'\nhistory = [{role='robot', text='hi'}]\nsteps = [{type='pause', seconds=1}]",
        "items[0].history[0].role",
        "one of user, assistant, system",
    ),
    (
        "",
        "id = 'x'\nhistory = [{role='user'}]\nsteps = [{type='pause', seconds=1}]",
        "items[0].history[0]",
        "exactly the keys role and text",
    ),
    (
        "",
        "id = 'x'\nhistory = []\nhistory_text = 'a'\nsteps = [{type='pause', seconds=1}]",
        "items[0].history_text",
        "not both",
    ),
    (
        "",
        "id = 'x'\nprefill_speed = 0.5\nsteps = [{type='pause', seconds=1}]",
        "items[0].prefill_speed",
        ">= 1",
    ),
    (
        "",
        "id = 'x'\nsteps = [{type='turn', file='a.wav', barge_in='yes'}]",
        "items[0].steps[0].barge_in",
        "true or false",
    ),
]


@pytest.mark.parametrize(("head", "item", "field", "words"), BAD)
def test_bad_files_name_the_file_and_the_field(
    audio_dir: Path, head: str, item: str, field: str, words: str
) -> None:
    text = head + "\n" + ("[[items]]\n" + item if item else GOOD.split("[[items]]", 1)[0][0:0])
    if not item:
        text += "\n[[items]]\nid = 'ok'\nsteps = [{type='pause', seconds=1}]\n"
    path = audio_dir / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_scenario_file(str(path), RATE)
    assert e.value.field == field
    assert str(path) in str(e.value) and field in str(e.value) and words in str(e.value)


def test_duplicate_ids_parse_errors_and_missing_files(audio_dir: Path) -> None:
    p = audio_dir / "dup.toml"
    p.write_text("[[items]]\nid='a'\nsteps=[{type='pause',seconds=1}]\n" * 2)
    with pytest.raises(ScenarioError, match=r"items\[1\]\.id: duplicate id 'a'"):
        load_scenario_file(str(p), RATE)
    p.write_text("[[items]\nid=")
    with pytest.raises(ScenarioError, match="does not parse"):
        load_scenario_file(str(p), RATE)
    (audio_dir / "j.json").write_text("[1, 2]")
    with pytest.raises(ScenarioError, match="top level must be a table"):
        resolve(str(audio_dir / "j.json"), RATE)
    with pytest.raises(ScenarioError, match="no such file"):
        resolve(str(audio_dir / "none.toml"), RATE)
    silent = audio_dir / "silent.wav"
    sf.write(silent, np.zeros(800, np.int16), RATE, subtype="PCM_16")
    p.write_text("[[items]]\nid='s'\nsteps=[{type='turn',file='silent.wav'}]")
    with pytest.raises(ScenarioError, match="no sound"):
        load_scenario_file(str(p), RATE)


def test_builtin_timing_suite_and_its_audio() -> None:
    items = resolve("builtin:timing", RATE)
    kinds = {i.item_id: i.meta["kind"] for i in items}
    assert kinds == {
        "pause": "pause",
        "turn_taking": "turn_taking",
        "backchannel": "backchannel",
        "interruption": "interruption",
        "user_backchannel": "user_backchannel",
        "whisper": "turn_taking",
        "noisy": "turn_taking",
    }
    by_id = {i.item_id: i for i in items}
    # the pause item: one turn whose audio holds a 1.5 s silence between two speech parts
    (turn,) = [s for s in by_id["pause"].plan.steps or [] if isinstance(s, Play)]
    x = np.abs(turn.pcm.astype(np.int32)) > 328
    blocks = x[: len(x) // 160 * 160].reshape(-1, 160).any(axis=1)
    runs, longest = 0, 0
    for b in blocks:
        runs = 0 if b else runs + 1
        longest = max(longest, runs)
    assert 1.5 <= longest / 100 < 1.7
    mono = [s for s in by_id["backchannel"].plan.steps or [] if isinstance(s, Play)]
    assert len(mono) == 1 and 11.0 < len(mono[0].pcm) / RATE < 15.0
    steps = by_id["interruption"].plan.steps or []
    assert WaitOnset(1.0, 15.0) in steps
    roles = [s.role for s in by_id["user_backchannel"].plan.steps or [] if isinstance(s, Play)]
    assert roles == ["turn", "backchannel", "backchannel"]
    folder = Path(data_path("timing"))
    sizes = {p.name: p.stat().st_size for p in folder.glob("*.wav")}
    assert sizes and max(sizes.values()) < 150_000 and sum(sizes.values()) < 1_500_000
    for p in folder.glob("*.wav"):
        info = sf.info(p)
        assert (info.samplerate, info.channels) == (RATE, 1)
    assert [i.item_id for i in resolve("builtin:demo", RATE)] == ["what", "weather", "recipe"]


def test_rig_scenarios_lists_the_builtin_suites() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rig", "scenarios", "--json"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"builtin:demo", "builtin:timing"}
    assert [i["item"] for i in data["builtin:timing"]] == [
        "pause",
        "turn_taking",
        "backchannel",
        "interruption",
        "user_backchannel",
        "whisper",
        "noisy",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "rig", "scenarios", "builtin:nope"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "no built-in suite" in r.stderr


# -- end to end against the reference system ---------------------------------------------------


async def run_scenario(
    tmp_path: Path, text: str, sim: SimConfig, run_id: str = "r"
) -> tuple[Path, dict]:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    items = load_scenario_file(str(path), RATE)
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
        result = await Runner(
            str(tmp_path / "out"), RunnerSettings(run_id=run_id, concurrency=4)
        ).run(specs)
    finally:
        await server.stop()
    return tmp_path / "out" / run_id, result


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.realtime
@pytest.mark.parametrize("speed", [0.0, 1.0])
async def test_injection_lands_n_s_into_the_reply_as_played(tmp_path: Path, speed: float) -> None:
    wav(tmp_path, "q.wav", 0.6)
    wav(tmp_path, "stop.wav", 0.4, 600)
    text = """
[[items]]
id = "int"
kind = "interruption"
max_s = 20
steps = [
  { type = "turn", file = "q.wav", pad_before_s = 0.2 },
  { type = "inject", role = "interruption", file = "stop.wav", offset_s = 0.9, timeout_s = 8 },
  { type = "drain", quiet_s = 0.8, max_s = 6 },
]
"""
    sim = SimConfig(latency_ms=200, endpoint_silence_ms=300, reply_s=3.0, reply_speed=speed)
    run, result = await run_scenario(tmp_path, text, sim)
    d = run / "rollouts" / "int"
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "ok"
    t0 = m["t0_ns"]
    onset_play_ns = m["responses"][0]["onset_ns"]
    onset_sample = (onset_play_ns - t0) * RATE // 1_000_000_000
    events = read_jsonl(d / "events.jsonl")
    inject = next(e for e in events if e["kind"] == "inject")
    # on the session timeline: the injection's first sample is 0.9 s of *played* reply later
    assert abs(inject["sample"] - onset_sample - round(0.9 * RATE)) <= 1
    user, rate = sf.read(d / "user.wav", dtype="int16")
    loud = np.flatnonzero(np.abs(user[inject["sample"] :].astype(np.int32)) > 328)
    assert loud.size and loud[0] < 16  # the injected audio really starts at that sample
    downs = [c for c in read_jsonl(d / "chunks.jsonl") if c["dir"] == "down"]
    arrived_s = sum(c["n_samples"] for c in downs if c["t_ns"] < inject["t_ns"]) / RATE
    if speed == 0:
        assert arrived_s == pytest.approx(3.0, abs=0.05)  # received: the whole reply
    else:
        assert arrived_s < 1.5  # real time: received about as much as was played
    trunc = [e for e in events if e["kind"] == "playback.truncate"]
    assert trunc and trunc[0]["turn"] == 1
    # the manifest records the rule, and the runner added timing and the verdict
    manifest = json.loads((run / "manifest.json").read_text())
    steps = manifest["rollouts"]["int"]["plan"]["steps"]
    assert {"type": "WaitOnset", "offset_s": 0.9, "timeout_s": 8.0} in steps
    assert m["timing"]["kind"] == "interruption" and isinstance(m["pass"], bool | type(None))
    assert len(m["timing"]["yields"]) == 1
    assert result["status_counts"] == {"ok": 1}


@pytest.mark.realtime
async def test_release_after_quiet_on_the_playback_clock(
    tmp_path: Path,
) -> None:
    wav(tmp_path, "q.wav", 0.5)
    text = """
[[items]]
id = "rel"
kind = "turn_taking"
max_s = 20
steps = [
  { type = "turn", file = "q.wav", pad_before_s = 0.2 },
  { type = "release", quiet_s = 0.6, timeout_s = 10 },
  { type = "turn", file = "q.wav", pad_before_s = 0 },
  { type = "drain", quiet_s = 0.8, max_s = 6 },
]
"""
    sim = SimConfig(latency_ms=150, endpoint_silence_ms=300, reply_s=1.5, reply_speed=0.0)
    run, result = await run_scenario(tmp_path, text, sim)
    d = run / "rollouts" / "rel"
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "ok" and len(m["responses"]) == 2
    t0 = m["t0_ns"]
    onset_sample = (m["responses"][0]["onset_ns"] - t0) * RATE // 1_000_000_000
    release = next(e for e in read_jsonl(d / "events.jsonl") if e["kind"] == "release")
    # the reply arrived in one burst; it is *played* for 1.5 s, then 0.6 s of quiet
    expected = onset_sample + round((1.5 + 0.6) * RATE)
    assert expected <= release["sample"] <= expected + 320 + 1  # within one frame
    assert m["timing"]["kind"] == "turn_taking" and len(m["timing"]["responses"]) == 2
    assert m["pass"] is True  # 300 ms endpointing + 150 ms model < 2 s
    assert result["status_counts"] == {"ok": 1}


def test_analysis_failure_still_writes_metrics(tmp_path: Path) -> None:
    import asyncio

    wav(tmp_path, "q.wav", 0.3)
    text = (
        "[[items]]\nid='x'\nkind='turn_taking'\n"
        "steps=[{type='turn',file='q.wav'},{type='drain',quiet_s=0.3,max_s=3}]\n"
    )
    path = tmp_path / "s.toml"
    path.write_text(text)
    (item,) = load_scenario_file(str(path), RATE)
    item.meta["rules"] = {"no_such_rule": 1}  # TimingParams refuses it inside the worker

    async def main() -> dict:
        server = SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=200, reply_s=0.3))
        url = await server.start()
        try:
            spec = RolloutSpec(
                "x", item.plan, ws_factory(url, "rig", RATE, {}), {}, item.meta, SessionConfig()
            )
            return await Runner(str(tmp_path / "out"), RunnerSettings(run_id="r")).run([spec])
        finally:
            await server.stop()

    result = asyncio.run(main())
    m = json.loads((tmp_path / "out" / "r" / "rollouts" / "x" / "metrics.json").read_text())
    # kept, but not ok: the analysis failed (rig.analysis.outcome; redone on resume)
    assert m["status"] == "analysis_error" and m["session_status"] == "ok"
    assert m["responses"][0]["latency_ms"] is not None
    assert "no_such_rule" in m["timing"]["error"] and m["pass"] is None
    assert result["status_counts"] == {"analysis_error": 1}
    assert os.path.exists(tmp_path / "out" / "r" / "manifest.json")
