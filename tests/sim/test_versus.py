"""`rig demo` checks itself against the reference system's truth log, in one line."""

from __future__ import annotations

import re

import pytest

from rig.core.units import NS_PER_MS
from rig.sim.versus import truth_replies, versus_truth
from tests.support.cli import rig


def _truth(conn: int, end_ns: int, sent_ns: int) -> list[dict[str, object]]:
    return [
        {"event": "speech_end", "t_ns": end_ns, "conn": conn, "audio_end_ns": end_ns},
        {"event": "reply_chunk", "t_ns": sent_ns - 10_000, "conn": conn, "loud": False,
         "emit_ns": sent_ns - 20_000, "response": 1},
        {"event": "reply_chunk", "t_ns": sent_ns, "conn": conn, "loud": True,
         "emit_ns": sent_ns - 100_000, "response": 1},
        {"event": "reply_chunk", "t_ns": sent_ns + 40 * NS_PER_MS, "conn": conn, "loud": True,
         "emit_ns": sent_ns, "response": 1},
    ]  # fmt: skip


def test_each_measured_onset_is_paired_with_its_own_truth_reply() -> None:
    s = 10**12
    events = _truth(1, s, s + 900 * NS_PER_MS) + _truth(
        2, s + 300 * NS_PER_MS, s + 1200 * NS_PER_MS
    )
    assert len(truth_replies(events)) == 2  # the first loud chunk of each reply only
    rollouts = [
        {"responses": [{"onset_arrival_ns": s + 900 * NS_PER_MS + 300_000, "model_ms": 899.95}]},
        {"responses": [{"onset_arrival_ns": s + 1200 * NS_PER_MS - 200_000, "model_ms": 900.0}]},
        {"responses": [{"onset_arrival_ns": s + 5000 * NS_PER_MS}]},  # matches no truth reply
    ]
    v = versus_truth(rollouts, events)
    assert v is not None and v.n == 2
    assert v.onset_error_max_ms == pytest.approx(0.3)
    assert v.model_truth_ms == pytest.approx(899.9)
    assert v.model_error_max_ms == pytest.approx(0.1)
    assert versus_truth([], events) is None


@pytest.mark.realtime
def test_demo_prints_measured_vs_truth(tmp_path) -> None:
    r = rig("demo", "--headless", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("vs the reference system"))
    m = re.fullmatch(
        r"vs the reference system's own truth log \(3 responses\): reply onset ([-+]\d+\.\d) ms "
        r"\(worst ([-+]\d+\.\d)\), model time (\d+\.\d) vs (\d+\.\d) ms \(worst error "
        r"(\d+\.\d) ms\)",
        line,
    )
    assert m, line
    assert abs(float(m.group(2))) < 5 and float(m.group(5)) < 5
    assert abs(float(m.group(4)) - 880) < 30  # the sim's endpointing + model time, by its own clock
