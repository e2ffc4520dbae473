"""History preload end to end: prefill audio goes out faster than real time over a real
WebSocket to the reference system (its own process) and the live turn after it is still timed
against the system's ground truth; text history is refused where the dialect cannot take it."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.audio.source import tone
from rig.sim.truth import read_truth
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

RATE = 16_000
PREFILL_S = 3.0


def scenario(tmp_path: Path, extra: str = "") -> Path:
    # the history is quiet (under the system's endpointing): it is context, not a question
    sf.write(tmp_path / "hist.wav", tone(200, PREFILL_S, RATE, level_dbfs=-60).pcm, RATE)
    sf.write(tmp_path / "q.wav", tone(300, 1.0, RATE).pcm, RATE)
    p = tmp_path / "s.toml"
    p.write_text(
        "[[items]]\nid = 'h'\nkind = 'turn_taking'\nprefill = 'hist.wav'\n"
        + extra
        + "steps = [{type='turn', file='q.wav', pad_before_s=0.5}, {type='drain', quiet_s=0.8}]\n"
    )
    return p


def rig_run(path: Path, url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", "run", str(path), "--target", url, "--out", str(out),
         "--run-id", "run", "--headless", *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.realtime
def test_fast_prefill_over_websocket_keeps_the_live_turn_on_the_truth(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    sim, url = start_sim("--truth-log", str(truth_path), "--latency-ms", "300", "--reply-s", "0.6")
    try:
        r = rig_run(scenario(tmp_path, "prefill_speed = 5\n"), url, tmp_path / "out")
    finally:
        stop_sim(sim)
    assert_run_ok(r.returncode, r.stderr, tmp_path / "out" / "run")
    d = tmp_path / "out" / "run" / "rollouts" / "h"
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "ok", m
    p = m["uplink"]["prefill"]
    assert p["speed"] == 5.0 and p["fast_frames"] == PREFILL_S * 50
    ups = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
    ups = [u for u in ups if u["dir"] == "up"]
    fast = [u for u in ups if u.get("prefill_speed") == 5.0]
    assert len(fast) == PREFILL_S * 50
    took_s = (ups[len(fast)]["t_sched_ns"] - fast[0]["t_sched_ns"]) / 1e9
    assert took_s == pytest.approx(PREFILL_S / 5, abs=0.001)  # 3 s of history in 0.6 s
    assert np.median(np.diff([u["t_ns"] for u in fast])) == pytest.approx(4e6, abs=1e6)
    assert m["uplink"]["stalls"] == 0
    # the system heard all of it, and the live turn is timed as without a prefill
    truth = read_truth(str(truth_path))
    end = next(t for t in truth if t["event"] == "speech_end")
    first = next(t for t in truth if t["event"] == "reply_chunk")
    (resp,) = m["responses"]
    assert resp["latency_ms"] == pytest.approx((first["t_ns"] - end["audio_end_ns"]) / 1e6, abs=5)
    manifest = json.loads((tmp_path / "out" / "run" / "manifest.json").read_text())
    assert manifest["rollouts"]["h"]["meta"]["prefill_speed"] == 5.0


def test_text_history_is_refused_where_the_dialect_cannot_take_it(tmp_path: Path) -> None:
    path = scenario(tmp_path, "history_text = 'we talked about trains'\n")
    r = rig_run(path, "ws://127.0.0.1:9", tmp_path / "out", "--dialect", "moshi")
    assert r.returncode == 2
    assert "takes no text history" in r.stderr and "Traceback" not in r.stderr
    r = rig_run(path, "ws://127.0.0.1:9", tmp_path / "out", "--transport", "webrtc")
    assert r.returncode == 2 and "text history goes to a WebSocket dialect" in r.stderr
