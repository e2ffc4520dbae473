"""`--loop uvloop`: rig run and rig sim on uvloop, end to end, and the run says what it ran on.

The rig's timing rests on its event loop (the tick's timerfd, `transport.write`, the receive
side); uvloop must give the same figures against the same ground truth, and the manifest must
record the loop that actually ran, not the one asked for.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from rig.runs import eventloop
from rig.sim.truth import read_truth
from tests.support.runone import run_turn_what
from tests.support.simproc import start_sim, stop_sim

uvloop = pytest.importorskip("uvloop")


def test_run_on_gives_the_named_loop_and_says_which() -> None:
    async def which() -> str:
        return eventloop.event_loop()

    assert eventloop.run_on("asyncio", which()) == "asyncio"
    assert eventloop.run_on("uvloop", which()).startswith("uvloop ")
    with pytest.raises(ValueError, match="--loop must be one of asyncio, uvloop"):
        eventloop.loop_factory("trio")
    # the loop is the process's own: a later plain asyncio.run is standard again
    assert asyncio.run(which()) == "asyncio"


@pytest.mark.realtime
def test_a_rollout_on_uvloop_against_a_sim_on_uvloop_matches_the_truth(tmp_path) -> None:
    truth_path = str(tmp_path / "truth.jsonl")
    proc, url = start_sim(
        "--loop", "uvloop", "--truth-log", truth_path, "--latency-ms", "300",
        "--endpoint-silence-ms", "400", "--reply-s", "0.6",
    )  # fmt: skip
    try:
        r = run_turn_what(tmp_path, url, "--loop", "uvloop")
    finally:
        stop_sim(proc)
    m = r.metrics
    assert r.returncode == 0 or (r.returncode == 3 and m["timing_valid"] is False), r.stderr
    assert m["status"] == "ok", m
    manifest = json.loads((r.run_dir / "manifest.json").read_text())
    assert manifest["scheduling"]["event_loop"].startswith("uvloop ")
    truth = read_truth(truth_path)
    end = next(t for t in truth if t["event"] == "speech_end")
    first_chunk = next(t for t in truth if t["event"] == "reply_chunk")
    (resp,) = m["responses"]
    assert resp["latency_ms"] == pytest.approx(
        (first_chunk["t_ns"] - end["audio_end_ns"]) / 1e6, abs=5.0
    )
    assert m["uplink"]["tick_frames"] > 0.9 * m["uplink"]["frames"]  # the tick ran on uvloop
