"""Yield measured on the system, end to end: `rig run` against `rig sim` in other processes,
real time, real loopback WebSocket, checked against the sim's truth log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rig.scenarios.builtin import data_path
from rig.sim.truth import read_truth
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime

SCENARIO = """
[defaults]
pad_before_s = 0.3
max_s = 25.0
drain_quiet_s = 0.8
[[items]]
id = "int"
kind = "interruption"
steps = [
  {{ type = "turn", file = "{q}" }},
  {{ type = "inject", role = "interruption", file = "{i}", offset_s = 1.0, timeout_s = 10.0 }},
  {{ type = "drain" }},
]
"""


def _start(tmp: Path, name: str, scenario: Path, *sim: str) -> dict[str, Any]:
    """Start one sim and one `rig run` against it (returns the handles)."""
    truth = tmp / f"{name}.truth.jsonl"
    proc, url = start_sim("--truth-log", str(truth), "--endpoint-silence-ms", "300", *sim)
    run = subprocess.Popen(
        [sys.executable, "-m", "rig", "run", str(scenario), "--target", url]
        + ["--out", str(tmp / "out"), "--run-id", name, "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return {"sim": proc, "run": run, "truth": truth, "dir": tmp / "out" / name / "rollouts"}


def _finish(h: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        out, _ = h["run"].communicate(timeout=90)
    finally:
        stop_sim(h["sim"])
    assert h["run"].returncode in (0, 3), out
    (rollout,) = [d for d in h["dir"].iterdir() if d.is_dir()]
    return json.loads((rollout / "metrics.json").read_text()), read_truth(str(h["truth"]))


def test_yield_agrees_with_truth_and_ignoring_fails(tmp_path: Path) -> None:
    folder = Path(data_path("timing"))
    scenario = tmp_path / "int.toml"
    scenario.write_text(SCENARIO.format(q=folder / "interrupt_q.wav", i=folder / "interrupt.wav"))
    delays = (100, 400, 800)
    handles = {
        f"yield{d}": _start(
            tmp_path, f"yield{d}", scenario, "--reply-s", "4", "--yield-after-ms", str(d)
        )
        for d in delays
    }
    # a system that ignores the barge-in, sending its reply all at once: the rig truncates
    # its playback at the barge-in, the stream shows the reply went on
    handles["ignore_burst"] = _start(
        tmp_path, "ignore_burst", scenario, "--no-barge-in", "--reply-speed", "0", "--reply-s", "6"
    )
    handles["ignore_rt"] = _start(
        tmp_path, "ignore_rt", scenario, "--no-barge-in", "--reply-s", "4"
    )
    results = {name: _finish(h) for name, h in handles.items()}
    for d in delays:
        m, truth = results[f"yield{d}"]
        (cancel,) = [t for t in truth if t["event"] == "reply_cancel"]
        (y,) = m["timing"]["yields"]
        end_ns = m["t0_ns"] + round(y["stream"]["stream_end_s"] * 1e9)
        # the stream stops where the sim stopped (plus loopback), within 5 ms
        assert abs(end_ns - cancel["audio_end_ns"]) < 5_000_000, (d, y, cancel)
        assert cancel["t_ns"] - cancel["barge_in_ns"] == d * 1_000_000
        # the acknowledgement (response.cancelled) arrives when the sim stopped
        ack_ns = m["t0_ns"] + round(y["ack"]["ack_s"] * 1e9)
        assert abs(ack_ns - cancel["t_ns"]) < 5_000_000
        assert y["yield_from"] == "stream" and y["yield_ms"] == y["stream"]["yield_ms"]
        assert m["pass"] is (y["yield_ms"] <= 1000.0)
    assert results["yield100"][0]["pass"] is True
    for name in ("ignore_burst", "ignore_rt"):
        m, truth = results[name]
        assert not [t for t in truth if t["event"] == "reply_cancel"]
        (y,) = m["timing"]["yields"]
        # real time: it talked on, a failure; a burst: its stream cannot tell (sent ahead,
        # no acknowledgement), which is not a failure (tests/test_cannot_tell_e2e.py)
        assert m["pass"] is (None if name == "ignore_burst" else False), (name, y)
        assert y["ack"]["yield_ms"] is None  # never acknowledged
        assert y["playback_untruncated"]["yield_ms"] > 2000
    (burst,) = results["ignore_burst"][0]["timing"]["yields"]
    assert burst["stream"]["sent_ahead"] is True
    # the rig's own truncated track "yields" at once (the 20 ms): never the rule's
    assert burst["playback_truncated"]["yield_ms"] < 100
    assert results["ignore_rt"][0]["timing"]["yields"][0]["stream"]["yield_ms"] > 2000
