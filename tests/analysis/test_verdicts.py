"""rig.analysis.verdicts: pass / fail / n/a (cannot tell) / no rule, and the aggregate's use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rig.analysis.aggregate import aggregate, csv_rows
from rig.analysis.verdicts import interruption_verdict, na_reason, verdict_of


def _m(kind: str | None, passed: bool | None, **timing: Any) -> dict[str, Any]:
    return {"status": "ok", "pass": passed, "timing": {"kind": kind, "pass": passed, **timing}}


def test_verdict_of() -> None:
    assert verdict_of(_m("pause", True)) == "pass"
    assert verdict_of(_m("pause", False)) == "fail"
    na = _m("interruption", None, rule="interruption: ...: cannot tell by stream: sent ahead")
    assert verdict_of(na) == "n/a" and "cannot tell" in str(na_reason(na))
    assert verdict_of(_m(None, None)) is None  # no rule
    assert verdict_of(_m("free", None)) is None
    assert verdict_of({"status": "analysis_error", "timing": {"error": "x"}}) is None
    assert verdict_of({"status": "error"}) is None and na_reason(_m("pause", True)) is None


def test_interruption_verdict_fail_beats_cannot_tell_beats_pass() -> None:
    ok = {"yield_ms": 200.0, "why_none": None, "pass": True}
    slow = {"yield_ms": 3000.0, "why_none": None, "pass": False}
    ahead = {"yield_ms": None, "why_none": "sent ahead: ...", "pass": None,
             "ack": {"yield_ms": None}}  # fmt: skip
    assert interruption_verdict([ok, ok], "stream", 1.0)[0] is True
    assert interruption_verdict([ok, slow, ahead], "stream", 1.0)[0] is False
    v, why = interruption_verdict([ok, ahead], "stream", 1.0)
    assert v is None and "cannot tell by stream: sent ahead" in why
    assert "no acknowledgement from the server either" in why
    acked = {**ahead, "ack": {"yield_ms": 120.0}}
    assert "judge by rules yield_from = 'ack'" in interruption_verdict([acked], "stream", 1.0)[1]
    # yields recorded before `pass` existed: a missing yield fails, as it did then
    assert interruption_verdict([{"yield_ms": None, "why_none": "x"}], "stream", 1.0)[0] is False


def _write(run: Path, rid: str, m: dict[str, Any]) -> None:
    d = run / "rollouts" / rid
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps({"rollout_id": rid, "item": rid, **m}))


def test_aggregate_counts_na_apart(tmp_path: Path) -> None:
    y_na = {"yield_ms": None, "pass": None, "why_none": "sent ahead"}
    y_ok = {"yield_ms": 100.0, "pass": True}
    _write(tmp_path, "a", _m("interruption", None, yields=[y_na], rule="cannot tell"))
    _write(tmp_path, "b", _m("interruption", True, yields=[y_ok]))
    _write(tmp_path, "c", _m("pause", False))
    rep = aggregate(tmp_path, n_resamples=50)
    p = rep["overall"]["pass"]
    assert (p["evaluated"], p["passed"], p["n_a"], p["rate"]) == (2, 1, 1, 0.5)
    s = rep["overall"]["interruption_success"]
    assert (s["evaluated"], s["passed"], s["n_a"]) == (1, 1, 1)
    assert rep["cannot_tell"] == ["a"]
    by_item = {row["item"]: row for row in csv_rows(rep)}
    assert by_item["a"]["pass_na"] == 1 and by_item["a"]["pass_evaluated"] == 0
