"""The loop monitor and the verdict on the rig's own timing (rig.core.selfcheck), by plain calls."""

import pytest

from rig.core.selfcheck import LoopMonitor, TimingTolerance, judge

MS = 1_000_000


def feed(mon: LoopMonitor, t0: int, lags_ms: list[float], period_ms: float = 10) -> int:
    t = t0
    for lag in lags_ms:
        t += round(period_ms * MS)
        mon.tick(t, t + round(lag * MS))
    return t


def test_a_rollout_sees_only_the_loop_of_its_own_span() -> None:
    mon = LoopMonitor()
    t = feed(mon, 0, [40.0] + [0.1] * 99)  # someone else's bad moment, before the mark
    mark = mon.mark(t)
    t = feed(mon, t, [0.1] * 98 + [3.0, 7.0])
    s = mon.since(mark, t)
    assert s.ticks == 100
    assert s.lag_max_ms == 7.0  # not the 40 ms before the mark
    assert s.lag_p50_ms == 0.25  # bin upper edge: a bound, never an underestimate
    assert 3.0 <= s.lag_p99_ms <= 3.25
    assert s.span_ms == pytest.approx(1000.0, abs=11)
    assert mon.since(mon.mark(0), t).lag_max_ms == 40.0


def test_lags_under_the_kept_threshold_give_a_bounded_max_and_quantiles_never_exceed_it() -> None:
    mon = LoopMonitor()
    mark = mon.mark(0)
    t = feed(mon, 0, [0.3] * 50)
    s = mon.since(mark, t)
    assert s.lag_max_ms == 0.5 and s.lag_p99_ms == 0.5 and s.lag_p50_ms == 0.5


def test_run_delay_share_and_writer_backlog_in_the_span() -> None:
    mon = LoopMonitor()
    mon.run_delay(5 * MS)
    mon.backlog(1, 9_000)  # before the mark: not this rollout's
    mark = mon.mark(10)
    mon.backlog(20, 120)
    mon.run_delay(5 * MS + 100 * MS)
    s = mon.since(mark, 10 + 1000 * MS)
    assert s.run_delay_ms == 100.0 and s.run_delay_share == pytest.approx(0.1)
    assert s.backlog_max == 120


def test_steal_is_the_machines_steal_in_the_span_and_none_where_unread() -> None:
    mon = LoopMonitor()
    assert mon.since(mon.mark(0), 1000 * MS).steal_ms is None
    mon.steal(70 * MS)  # before the mark: another rollout's
    mark = mon.mark(10)
    mon.steal(70 * MS + 30 * MS)
    s = mon.since(mark, 10 + 1000 * MS)
    assert s.steal_ms == 30.0 and s.as_dict()["steal_ms"] == 30.0


def test_no_schedstat_means_no_run_delay_and_no_reason_from_it() -> None:
    mon = LoopMonitor()
    mark = mon.mark(0)
    s = mon.since(mark, feed(mon, 0, [0.1] * 10))
    assert s.run_delay_ms is None and s.run_delay_share is None
    assert judge(1.0, 0, s, TimingTolerance()).valid


def test_every_failed_check_is_a_reason() -> None:
    mon = LoopMonitor()
    mon.run_delay(0)
    mark = mon.mark(0)
    t = feed(mon, 0, [0.1] * 90 + [30.0] * 10)
    mon.backlog(t - 1, 6_000)
    mon.run_delay(200 * MS)
    v = judge(6.5, 2, mon.since(mark, t), TimingTolerance())
    assert not v.valid
    text = " | ".join(v.reasons)
    for part in (
        "uplink lateness p99 6.50 ms > 5.0 ms",
        "2 stalled frames",
        "event loop lag p99",
        "event loop lag max 30.0 ms > 20.0 ms",
        "waited for a CPU 20.0% of the time",
        "writer backlog 6000 records > 5000",
    ):
        assert part in text, (part, text)
    d = v.as_dict(TimingTolerance())
    assert d["tolerance"]["lateness_p99_ms"] == 5.0 and d["stalls"] == 2
    assert d["loop"]["lag_max_ms"] == 30.0


def test_a_clean_rollout_is_valid_and_the_tolerance_is_settable() -> None:
    mon = LoopMonitor()
    mark = mon.mark(0)
    s = mon.since(mark, feed(mon, 0, [0.2] * 100))
    assert judge(0.8, 0, s, TimingTolerance()).valid
    strict = TimingTolerance(lateness_p99_ms=0.5)
    v = judge(0.8, 0, s, strict)
    assert not v.valid and v.reason == "uplink lateness p99 0.80 ms > 0.5 ms"


def test_unmeasured_loop_is_not_valid() -> None:
    v = judge(0.1, 0, None, TimingTolerance())
    assert not v.valid and v.reasons == ("event loop lag not measured",)
