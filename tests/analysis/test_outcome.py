"""rig.analysis.outcome: a failed analysis makes a finished rollout `analysis_error`."""

from __future__ import annotations

from rig.analysis.outcome import analysis_failure, settle_analysis
from rig.recordings.rundir import DONE_STATUSES


def test_a_failed_analysis_is_analysis_error_and_not_done() -> None:
    m = {"status": "ok", "reason": None, "timing": {"error": "BrokenProcessPool: died"}}
    out = settle_analysis(m)
    assert out["status"] == "analysis_error" and out["pass"] is None
    assert out["reason"] == "analysis failed: BrokenProcessPool: died"
    assert out["session_status"] == "ok" and "analysis_error" not in DONE_STATUSES
    no_audio = settle_analysis({"status": "no_audio", "reason": "the system sent no audio"},
                               "analysis worker did not start: exited with code 1")  # fmt: skip
    assert no_audio["status"] == "analysis_error"
    assert no_audio["session_reason"] == "the system sent no audio"


def test_asr_failure_counts_and_a_good_analysis_is_untouched() -> None:
    asr = {"status": "ok", "timing": {"pass": True, "asr": "error", "asr_error": "no model"}}
    assert analysis_failure(asr) == "asr: no model"
    assert settle_analysis(asr)["status"] == "analysis_error"
    good = {"status": "ok", "timing": {"pass": True, "asr": "off"}}
    assert settle_analysis(good) is good
    assert settle_analysis({"status": "ok"}) == {"status": "ok"}  # analysis off: nothing failed


def test_an_earlier_error_keeps_its_status() -> None:
    m = {"status": "write_error", "reason": "recording failed: ENOSPC",
         "timing": {"error": "not analysed: files incomplete"}}  # fmt: skip
    out = settle_analysis(m)
    assert out["status"] == "write_error" and out["reason"] == m["reason"]
    assert out["analysis_error"] == "not analysed: files incomplete"
