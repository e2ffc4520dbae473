"""`rig report` on a crashed run: stale WAV headers are found and, with --repair-wav, fixed
(the data a crash left after the last header update is kept and counted)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import soundfile as sf

from rig.cli import main
from rig.recordings.wav import WavAppender


def _crashed_run(tmp_path: Path) -> Path:
    d = tmp_path / "run" / "rollouts" / "r"
    d.mkdir(parents=True)
    w = WavAppender(str(d / "user.wav"), 16_000)
    w.append(np.ones(1600, dtype=np.int16))
    w.flush()
    w._f.write(np.ones(800, dtype="<i2").tobytes())  # data written, header not yet updated
    w._f.flush()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"status": "running"}))
    return tmp_path / "run"


def test_report_finds_and_repairs_stale_wav_headers(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    run = _crashed_run(tmp_path)
    wav = run / "rollouts" / "r" / "user.wav"
    assert sf.info(str(wav)).frames == 1600  # a header-trusting reader misses the tail
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(run)]) == 0
    assert "user.wav" in out.getvalue() and "--repair-wav" in out.getvalue()
    assert sf.info(str(wav)).frames == 1600  # reporting alone changes nothing
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(run), "--repair-wav"]) == 0
    assert "repaired" in out.getvalue()
    assert sf.info(str(wav)).frames == 2400  # every appended sample counted
