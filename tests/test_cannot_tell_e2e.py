"""A burst sender's interruption is "cannot tell", end to end: `rig run` against
`rig sim --reply-speed 0` (barge-in honoured: it cuts what it has not sent, but it has sent
everything, and it sends no acknowledgement). The interruption item is `pass: null` with the
reason; the report counts it `n/a` and leaves it out of the pass rate; a gate says so, the
JUnit file skips it, and `--max n_na=0` fails (tests/analysis/test_gates.py: a pass-rate gate
with nothing judged has no value and says why)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rig.scenarios.builtin import data_path
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
[[items]]
id = "turn"
kind = "turn_taking"
steps = [{{ type = "turn", file = "{q}" }}, {{ type = "drain" }}]
"""


def _rig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", *args], capture_output=True, text=True, timeout=120
    )


def test_burst_sender_interruption_is_na_and_left_out_of_pass_rates(tmp_path: Path) -> None:
    folder = Path(data_path("timing"))
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.format(q=folder / "interrupt_q.wav", i=folder / "interrupt.wav"))
    sim, url = start_sim("--endpoint-silence-ms", "300", "--reply-speed", "0", "--reply-s", "5")
    try:
        run = _rig("run", str(scenario), "--target", url, "--out", str(tmp_path / "out"),
                   "--run-id", "b", "--headless", "--concurrency", "2")  # fmt: skip
    finally:
        stop_sim(sim)
    run_dir = tmp_path / "out" / "b"
    assert run.returncode in (0, 3), run.stderr[-3000:]  # 3: only the rig's own timing
    m = json.loads((run_dir / "rollouts" / "int" / "metrics.json").read_text())
    assert m["status"] == "ok", m.get("reason")
    (y,) = m["timing"]["yields"]
    assert y["stream"]["sent_ahead"] is True and y["ack"]["yield_ms"] is None, y
    assert m["pass"] is None and y["pass"] is None
    rule = m["timing"]["rule"]
    assert "cannot tell by stream" in rule and "sent ahead" in rule, rule
    assert "no acknowledgement" in rule, rule
    turn = json.loads((run_dir / "rollouts" / "turn" / "metrics.json").read_text())
    assert turn["pass"] is True, turn["timing"]["rule"]

    # the report: n/a counted apart, the pass rate over the judged rollout only
    junit = tmp_path / "j.xml"
    rep = _rig("report", str(run_dir), "--fail-under", "pass_rate=0.9", "--junit", str(junit))
    assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
    assert "1/1" in rep.stdout and "n/a 1" in rep.stdout, rep.stdout
    assert "left out of the pass rates: int" in " ".join(rep.stdout.split()), rep.stdout
    assert "gate ok: pass_rate = 1, wanted >= 0.9 (1 rollout n/a" in rep.stderr, rep.stderr
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    skipped = cases["int"].find("skipped")
    assert skipped is not None and "cannot tell" in (skipped.get("message") or "")
    assert cases["turn"].find("failure") is None and cases["turn"].find("skipped") is None
    data = json.loads(_rig("report", str(run_dir), "--json").stdout)
    assert data["overall"]["pass"]["evaluated"] == 1 and data["overall"]["pass"]["n_a"] == 1
    assert data["overall"]["interruption_success"] == {
        **data["overall"]["interruption_success"], "evaluated": 0, "n_a": 1,
    }  # fmt: skip
    assert data["gate_values"]["n_na"] == 1.0 and data["cannot_tell"] == ["int"]
    # n_na is a plain count: a CI that wants every rollout judged gates --max n_na=0
    gate = _rig("report", str(run_dir), "--max", "n_na=0")
    assert gate.returncode == 1 and "gate FAILED: n_na = 1, wanted <= 0" in gate.stderr
