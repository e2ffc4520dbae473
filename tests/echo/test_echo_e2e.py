"""The echo condition end to end: real time, loopback WebSocket, `rig sim` in a process."""

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from rig.audio.pcm import level_dbfs
from tests.support.runone import run_turn_what
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime
ECHO = ("--echo", "erl_db=10,delay_ms=40", "--max-s", "8")


@pytest.mark.parametrize("sensitive", [False, True])
def test_self_interruption_is_found_exactly_when_the_sim_yields_to_its_echo(
    tmp_path, sensitive: bool
) -> None:
    proc, url = start_sim(*(["--self-echo-sensitive"] if sensitive else []))
    try:
        r = run_turn_what(tmp_path, url, *ECHO)
    finally:
        stop_sim(proc)
    m = r.metrics
    block = m["timing"]["self_echo"]
    cond = block["condition"]
    assert cond["spec"] == "erl_db=10,delay_ms=40" and cond["frames_with_echo"] > 0
    if sensitive:
        assert block["self_interruptions"] >= 1 and block["by_server_event"] >= 1, block
        first = next(x for x in block["per_response"] if x["self_interrupted"])
        assert -35 < first["echo_dbfs"] < -15  # the -12 dBFS tone, 10 dB down
    else:
        assert m["status"] == "ok" and block["self_interruptions"] == 0, block
        assert block["responses"] == 1 and len(m["responses"]) == 1
    # user.wav is what was sent: the user's audio plus echo.wav
    roll = r.run_dir / "rollouts" / "turn_what"
    sent, _ = sf.read(roll / "user.wav", dtype="int16")
    echo, _ = sf.read(roll / "echo.wav", dtype="int16")
    assert echo.size == sent.size and np.any(echo)
    dry = sent.astype(np.int32) - echo
    assert np.abs(dry[:8000]).max() < 2000  # the padding before the question: no echo in it
    # each frame's level in chunks.jsonl is the level of what was sent, echo and all (a
    # frame of silence from the script is not silent once echo is in it)
    at, echoed = 0, 0
    for line in (roll / "chunks.jsonl").read_text().splitlines():
        c = json.loads(line)
        if c["dir"] == "up":
            end = at + c["n_samples"]
            assert c["level_dbfs"] == level_dbfs(sent[at:end]), (c, at)
            echoed += not dry[at:end].any() and echo[at:end].any()  # silence + echo
            at = end
    assert at == sent.size and echoed > 0


def test_a_delay_under_one_frame_is_refused_before_anything_streams(tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rig", "run", "rig/data/turn_what.wav", "--target",
         "ws://127.0.0.1:9", "--echo", "erl_db=10,delay_ms=10", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "delay_ms >= 22" in r.stderr and not any(tmp_path.iterdir())
