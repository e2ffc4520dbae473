"""Round-trip statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.clockfit.rtt import RttStats

MS = 1_000_000


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**10), st.integers(0, 10**12)), min_size=1, max_size=200),
    st.randoms(use_true_random=False),
)
def test_summary_is_order_free_and_consistent(samples: list[tuple[int, int]], rnd: object) -> None:
    stats = RttStats("ws-ping")
    shuffled = list(samples)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    for rtt, t in shuffled:
        stats.add(rtt, t)
    s = stats.summary()
    in_time = [r for r, _ in sorted(samples, key=lambda rt: rt[1])]
    assert s.count == len(samples) == len(stats)
    assert s.min_ns == min(in_time) == stats.min_ns
    assert s.max_ns == max(in_time)
    assert s.min_ns <= s.p50_ns <= s.p95_ns <= s.max_ns  # type: ignore[operator]
    assert s.mean_ns == pytest.approx(sum(in_time) / len(in_time))
    if len(in_time) >= 2:
        # Ties in t may be ordered either way; the definition only needs time order.
        if len({t for _, t in samples}) == len(samples):
            diffs = [abs(b - a) for a, b in zip(in_time, in_time[1:], strict=False)]
            assert s.jitter_ns == pytest.approx(sum(diffs) / len(diffs))
    else:
        assert s.jitter_ns is None
    assert s.first_t_ns == min(t for _, t in samples)
    assert s.last_t_ns == max(t for _, t in samples)


def test_constant_rtt_has_no_jitter_and_alternating_has_full() -> None:
    stats = RttStats()
    for k in range(10):
        stats.add(20 * MS, k * 100 * MS)
    assert stats.summary().jitter_ns == 0
    alt = RttStats()
    for k in range(10):
        alt.add((20 + 10 * (k % 2)) * MS, k * 100 * MS)
    s = alt.summary()
    assert s.jitter_ns == 10 * MS
    assert s.p50_ns == pytest.approx(np.percentile([20, 30] * 5, 50) * MS)


def test_empty_and_json() -> None:
    stats = RttStats("probe")
    empty = stats.summary()
    assert empty.count == 0 and empty.min_ns is None and stats.min_ns is None
    assert empty.as_dict()["rtt_min_ms"] is None
    stats.add(15 * MS, 0)
    stats.add(25 * MS, 1)
    d = json.loads(json.dumps(stats.summary().as_dict()))
    assert d["source"] == "probe"
    assert d["rtt_min_ms"] == 15 and d["rtt_max_ms"] == 25 and d["rtt_jitter_ms"] == 10


def test_bad_rtt_is_a_clear_error() -> None:
    stats = RttStats()
    with pytest.raises(ValueError, match="negative"):
        stats.add(-1, 0)
    with pytest.raises(ValueError, match="integer"):
        stats.add(1.5, 0)  # type: ignore[arg-type]
    assert len(stats) == 0
