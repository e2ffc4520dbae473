"""rig.status: one table of what each status counts as, one exit verdict."""

from __future__ import annotations

from rig.status import (
    DONE,
    EXIT_OK,
    EXIT_ROLLOUTS_FAILED,
    OK,
    TABLE,
    Status,
    counts,
    exit_verdict,
    is_done,
)


def test_the_table_covers_every_status_and_says_what_each_counts_as() -> None:
    assert set(TABLE) == set(Status)
    assert DONE == {"ok", "no_audio"} and OK == {"ok"}
    # the trust branch's analysis_error: not ok, failed, redone on resume
    c = counts("analysis_error")
    assert not c.done and not c.ok and c.failed
    assert not is_done("write_error") and is_done("no_audio")
    assert counts("a status from a newer rig").failed  # unknown: failed, not done


def test_one_verdict_for_run_demo_merge_and_the_engine() -> None:
    assert exit_verdict(["ok", "ok"]) == EXIT_OK
    assert exit_verdict([]) == EXIT_OK
    assert exit_verdict(["ok", "no_audio"]) == EXIT_ROLLOUTS_FAILED
    assert exit_verdict(["ok", "analysis_error"]) == EXIT_ROLLOUTS_FAILED
    assert exit_verdict(["ok"], timing_valid=[True, None]) == EXIT_OK
    assert exit_verdict(["ok"], timing_valid=[False]) == EXIT_ROLLOUTS_FAILED
    assert exit_verdict(["ok"], complete=False) == EXIT_ROLLOUTS_FAILED
    assert exit_verdict(["ok"], stopped=True) == EXIT_ROLLOUTS_FAILED
    assert exit_verdict({"ok": 3}) == EXIT_OK  # status counts, as merge and the engine have
