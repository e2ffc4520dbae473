"""Progress lines: due every interval, counts, rate and ETA from the given times."""

from __future__ import annotations

from rig.reporting.progress import ProgressMeter

S = 1_000_000_000


def test_lines_are_due_every_interval_with_rate_and_eta() -> None:
    m = ProgressMeter(10, start_ns=100 * S, interval_s=10)
    assert m.line(105 * S, []) is None  # not due yet
    assert m.line(110 * S, []) == "progress: 0/10 rollouts done elapsed 10s rate -, ETA -"
    assert m.line(115 * S, ["ok"]) is None
    # 4 done in 60 s: 4/min, 6 left -> 1m30s
    line = m.line(160 * S, ["ok", "ok", "error", "ok"])
    assert line == (
        "progress: 4/10 rollouts done (error 1, ok 3) elapsed 1m00s rate 4.0/min ETA 1m30s"
    )
    assert m.line(161 * S, ["ok"] * 4) is None
    assert m.line(161 * S, ["ok"] * 10, force=True).endswith("ETA 0s")  # type: ignore[union-attr]


def test_skipped_rollouts_do_not_inflate_the_rate() -> None:
    m = ProgressMeter(10, start_ns=0, interval_s=1, skipped=5)
    line = m.line(60 * S, ["ok"] * 6)  # 5 from an earlier attempt, 1 new in 60 s
    assert line is not None and "rate 1.0/min ETA 4m00s" in line
