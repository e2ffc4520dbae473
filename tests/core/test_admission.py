"""The AIMD admission controller of --concurrency auto (rig.core.admission), by plain calls."""

from rig.core.admission import Aimd, AimdConfig

MS = 1_000_000


def test_adds_while_in_budget_and_in_use_halves_when_over() -> None:
    a = Aimd(AimdConfig(budget_ms=5.0, start=4, increase=2, decrease=0.5, interval_ms=500))
    assert a.current == 4 and a.may_start(3) and not a.may_start(4)
    assert a.update(500 * MS, 1.0, peak_running=4) == 6  # used and fine: +2
    assert a.update(1000 * MS, 1.0, peak_running=2) == 6  # not used: no raise
    assert a.update(1500 * MS, 9.0, peak_running=6) == 3  # over budget: x0.5
    assert a.over_budget and not a.may_start(1)  # nothing more starts while over budget
    assert a.may_start(0)  # ... but the run goes on: the minimum always runs
    assert a.update(2000 * MS, 2.0, peak_running=3) == 5
    assert a.may_start(4) and not a.may_start(5)
    s = a.summary()
    assert s["max_limit_reached"] == 6 and s["over_budget_intervals"] == 1 and s["decisions"] == 4


def test_bounds_and_intervals() -> None:
    a = Aimd(AimdConfig(start=2, min_limit=1, max_limit=3, interval_ms=100))
    for k in range(5):
        a.update(k * 100 * MS, 50.0, 2)
    assert a.current == 1  # never below the minimum: the run always goes on
    for k in range(5, 10):
        a.update(k * 100 * MS, 0.5, a.current)
    assert a.current == 3  # never above the maximum
    assert a.update(10 * 100 * MS, None, 3) == 3  # no sample: no change
    assert not a.due(10 * 100 * MS + 50 * MS) and a.due(11 * 100 * MS)
