"""JUnit verdicts per rollout status (parsed back with junitparser)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from rig.reporting.junit import build_junit, write_junit


def test_every_kind_of_outcome(tmp_path: Path) -> None:
    from junitparser import Error, Failure, JUnitXml

    rollouts = [
        {"rollout_id": "ok", "status": "ok", "pass": True, "timing_valid": True},
        {"rollout_id": "slow", "status": "ok", "pass": True, "timing_valid": False,
         "rig_timing": {"reasons": ["uplink lateness p99 9.1 ms > 5 ms", "2 stalls"]}},
        {"rollout_id": "mute", "status": "no_audio", "reason": None},
        {"rollout_id": "gone", "status": "write_error", "reason": "user.wav: ENOSPC"},
        {"rollout_id": "bad\x01name", "status": "ok", "pass": False,
         "timing": {"rule": "answered within 2 s"}},
    ]  # fmt: skip
    path = tmp_path / "j.xml"
    write_junit(path, rollouts, run_id="r1")
    cases = {c.name: c for s in JUnitXml.fromfile(str(path)) for c in s}
    assert cases["ok"].is_passed
    (r,) = cases["slow"].result
    assert isinstance(r, Failure) and r.type == "timing_invalid"
    assert r.message == "uplink lateness p99 9.1 ms > 5 ms; 2 stalls"
    (r,) = cases["mute"].result
    assert isinstance(r, Failure) and r.type == "no_audio"
    (r,) = cases["gone"].result
    assert isinstance(r, Error) and r.message == "write_error: user.wav: ENOSPC"
    (r,) = cases["bad\ufffdname"].result  # a control character XML cannot carry: replaced
    assert isinstance(r, Failure) and r.message == "answered within 2 s"
    root = build_junit(rollouts)
    suite = root.find("testsuite")
    assert suite is not None and (suite.get("failures"), suite.get("errors")) == ("3", "1")
    ET.fromstring(ET.tostring(root))  # well-formed
