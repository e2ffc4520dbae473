"""CI gates on a report: parsing, comparisons, missing values fail."""

from __future__ import annotations

import pytest

from rig.analysis.gates import check_gates, gate_values, parse_gates
from rig.errors import ConfigError

REPORT = {
    "n_rollouts": 4,
    "status_counts": {"ok": 3, "error": 1},
    "overall": {
        "latency_ms": {"n": 3, "median": 800.0, "p95": 1300.0, "p99": 1390.0, "max": 1400.0},
        "pass": {"evaluated": 3, "passed": 2, "rate": 2 / 3},
        "timing_valid": {"evaluated": 0, "valid": 0, "rate": None},
        "components": {"model_ms": {"n": 3, "median": 700.0, "p95": 1100.0}},
    },
}


def test_values_and_verdicts() -> None:
    v = gate_values(REPORT)
    assert v["ok_rate"] == 0.75 and v["n_not_ok"] == 1.0 and v["latency_p50_ms"] == 800.0
    gates = parse_gates(
        ["pass_rate=0.9", "ok_rate=0.75", "timing_valid_rate=1"],
        ["latency_p95_ms=1200", "model_p95_ms=1200", "latency_p50_ms=1000"],
    )
    got = {r.gate.metric: r.passed for r in check_gates(REPORT, gates)}
    assert got == {
        "pass_rate": False,  # 0.67 < 0.9
        "ok_rate": True,  # the threshold itself passes
        "timing_valid_rate": False,  # nothing evaluated: no value fails
        "latency_p95_ms": False,
        "model_p95_ms": True,
        "latency_p50_ms": True,
    }
    lines = [r.line() for r in check_gates(REPORT, gates) if not r.passed]
    assert lines[0] == "gate FAILED: pass_rate = 0.666667, wanted >= 0.9"
    assert "timing_valid_rate = no value (nothing measured)" in lines[1]


@pytest.mark.parametrize(
    ("under", "maximum", "match"),
    [
        (["pass_rate"], [], "wants METRIC=NUMBER"),
        (["pass_rat=0.9"], [], "unknown metric 'pass_rat'; known: "),
        ([], ["latency_p95_ms=fast"], "'fast' is not a number"),
        ([], ["latency_p95_ms=nan"], "must be finite"),
    ],
)
def test_bad_gates_are_usage_errors(under: list[str], maximum: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_gates(under, maximum)


def test_na_rollouts_are_missing_data_and_the_gate_says_so() -> None:
    """Rollouts whose rule cannot tell (n/a) are neither passes nor failures: left out of
    pass_rate, counted in n_na, named on the pass-rate gate's line."""
    some = {**REPORT, "overall": {**REPORT["overall"],
            "pass": {"evaluated": 3, "passed": 3, "rate": 1.0, "n_a": 2}}}  # fmt: skip
    (r,) = check_gates(some, parse_gates(["pass_rate=0.9"], None))
    assert r.passed and r.line() == (
        "gate ok: pass_rate = 1, wanted >= 0.9 "
        "(2 rollouts n/a: the rule cannot tell, left out as missing data)"
    )
    assert gate_values(some)["n_na"] == 2.0
    none = {**REPORT, "overall": {**REPORT["overall"],
            "pass": {"evaluated": 0, "passed": 0, "rate": None, "n_a": 1}}}  # fmt: skip
    (r,) = check_gates(none, parse_gates(["pass_rate=0"], None))
    assert not r.passed and r.value is None
    assert r.line() == (
        "gate FAILED: pass_rate = no value (nothing measured), wanted >= 0 "
        "(1 rollout n/a: the rule cannot tell, left out as missing data)"
    )
    (r,) = check_gates(none, parse_gates(None, ["n_na=0"]))
    assert not r.passed and r.value == 1.0
    (r,) = check_gates(REPORT, parse_gates(["pass_rate=0.5"], None))
    assert r.note is None  # no n/a: the line as before
