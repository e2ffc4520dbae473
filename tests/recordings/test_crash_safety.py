"""A run killed with SIGKILL mid-stream leaves a readable run directory."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from rig.recordings.wav import read_wav
from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import wait_for

pytestmark = pytest.mark.realtime


def test_sigkill_mid_stream_keeps_everything_up_to_the_last_second(tmp_path) -> None:
    sim, url = start_sim("--latency-ms", "100", "--endpoint-silence-ms", "300", "--reply-s", "3")
    out = tmp_path / "out"
    try:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rig",
                "run",
                os.path.join("rig", "data", "turn_what.wav"),
                "--target",
                url,
                "--out",
                str(out),
                "--run-id",
                "k",
                "--headless",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert run.stderr is not None
        assert "start" in run.stderr.readline()
        chunks_file = out / "k" / "rollouts" / "turn_what" / "chunks.jsonl"

        def reply_playing() -> bool:  # mid-stream: the turn is sent, the reply is playing
            rows = chunks_file.read_text() if chunks_file.exists() else ""
            return rows.count('"dir":"down"') >= 25

        wait_for(reply_playing, timeout_s=30, every_s=0.05, what="the reply to be playing")
        t_kill = time.monotonic_ns()
        run.send_signal(signal.SIGKILL)
        run.wait(10)
    finally:
        stop_sim(sim)
    d = out / "k" / "rollouts" / "turn_what"
    assert not (d / "metrics.json").exists()  # it really died mid-run
    # WAVs open with a standard reader, and the repairing reader sees at least as much
    for name in ("user.wav", "system.wav"):
        data, rate = sf.read(str(d / name), dtype="int16")
        pcm, rate2 = read_wav(str(d / name))
        assert rate == rate2 == 16_000 and len(pcm) >= len(data) > 0
    # every JSONL line parses
    chunks = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "session.start"
    up = [c for c in chunks if c["dir"] == "up"]
    down = [c for c in chunks if c["dir"] == "down"]
    assert up and down
    assert t_kill - up[-1]["t_ns"] < 1_000_000_000
    assert [c["seq"] for c in up] == list(range(len(up)))
    # the user track holds every uplink chunk that was logged
    user, _ = read_wav(str(d / "user.wav"))
    assert len(user) >= (len(up) - 50) * 320
    assert np.abs(user).max() > 1000
    manifest = json.loads((out / "k" / "manifest.json").read_text())
    assert manifest["status"] == "running"  # never finished, never half-written
