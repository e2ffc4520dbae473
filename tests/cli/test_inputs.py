"""Bad input is caught before anything streams: one line, exit 2, nothing written."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.scenarios import data_path
from tests.support.cli import free_port, rig

TURN = str(data_path("turn_what.wav"))


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("http://127.0.0.1:8765", "did you mean ws://127.0.0.1:8765?"),
        ("127.0.0.1:8765", "did you mean ws://127.0.0.1:8765?"),
        ("https://h.example/v1?key=sk-1", "did you mean wss://h.example/v1?<redacted>?"),
    ],
)
def test_a_target_that_is_not_ws_is_a_usage_error(tmp_path: Path, target: str, said: str) -> None:
    r = rig("run", TURN, "--target", target, "--out", str(tmp_path), "--headless")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("rig run: error: --target wants a ws:// or wss:// URL")
    assert said in line and "sk-1" not in line
    assert list(tmp_path.iterdir()) == []  # no run directory


def test_a_silent_wav_is_refused_before_streaming(tmp_path: Path) -> None:
    path = tmp_path / "silent.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(b"\0\0" * 32_000)
    out = tmp_path / "out"
    r = rig("run", str(path), "--target", f"ws://127.0.0.1:{free_port()}", "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert "no sound above -40 dBFS" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_mp3_is_played_and_other_formats_are_named(tmp_path: Path) -> None:
    from rig.scenarios import resolve

    pcm, rate = sf.read(TURN, dtype="int16")
    mp3 = tmp_path / "turn.mp3"
    sf.write(str(mp3), pcm, rate, format="MP3")
    (item,) = resolve(str(mp3), 16_000)
    assert item.item_id == "turn" and np.abs(item.plan.pcm).max() > 1000
    r = rig("run", str(tmp_path / "turn.m4a"), "--target", "ws://127.0.0.1:9")
    assert r.returncode == 2
    assert ".wav, .flac, .ogg, .mp3" in r.stderr


@pytest.mark.parametrize("kind", ["empty", "wavs", "rollout"])
def test_report_on_a_folder_that_is_not_a_run_is_a_usage_error(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "x"
    folder.mkdir()
    if kind == "wavs":
        (folder / "a.wav").write_bytes(Path(TURN).read_bytes())
    if kind == "rollout":
        folder = tmp_path / "run" / "rollouts" / "what"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text("{}")
    r = rig("report", str(folder))
    assert r.returncode == 2, r.stdout
    assert "not a run directory" in r.stderr or "one rollout's folder" in r.stderr
    if kind == "rollout":
        assert f"rig report {tmp_path / 'run'}" in r.stderr
    assert r.stdout == ""
