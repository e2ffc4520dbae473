"""`lateness_summary` takes its percentiles from one sort: numpy's figures to the last bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.core.responses import lateness_summary, sorted_percentile


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(-(10**9), 10**10), min_size=1, max_size=400),
    q=st.sampled_from([0.0, 1.0, 25.0, 50.0, 95.0, 99.0, 99.9, 100.0]),
)
def test_sorted_percentile_is_numpys_linear_percentile(values: list[int], q: float) -> None:
    a = np.sort(np.asarray(values, dtype=np.float64) / 1e6)
    assert sorted_percentile(a, q) == float(np.percentile(a, q))


def test_lateness_summary_figures() -> None:
    late_ns = [3_000_000, 100_000, 250_000, 90_000_000, 120_000]
    a = np.asarray(late_ns, dtype=np.float64) / 1e6
    assert lateness_summary(late_ns) == {
        "p50": round(float(np.percentile(a, 50)), 4),
        "p99": round(float(np.percentile(a, 99)), 4),
        "max": 90.0,
        "mean": round(float(a.mean()), 4),
    }
    assert lateness_summary([]) == {"p50": None, "p99": None, "max": None, "mean": None}
