"""Clock steps: proven by four-timestamp probes (a jump of the NTP offset beyond what the two
probes' round trips allow), never claimed from queueing or path asymmetry; and the latency
split then fits each stretch between steps on its own."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.analysis.latency import fit_clock
from rig.clockfit.fit import fit_two_way
from rig.clockfit.steps import find_probe_steps
from rig.core.log import SessionLog
from rig.core.records import Probe

MS = 1_000_000
S = 1_000_000_000


def probes(
    rng: np.random.Generator,
    n: int,
    *,
    drift_ppm: float,
    offset_ns: int,
    up_ms: float,
    down_ms: float,
    jitter_ms: float,
    step_ns: int = 0,
    step_at: int | None = None,
    interval_s: float = 0.5,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Probes against a peer clock peer(t) = offset + t * (1 + drift) (+ step after t_step),
    with one-way delays min + exponential queueing (independent per direction)."""
    rate = 1 + drift_ppm * 1e-6
    t0 = (np.arange(n) * interval_s * S + 5 * S).astype(np.int64)
    up = (up_ms * MS + rng.exponential(jitter_ms * MS, n)).astype(np.int64)
    down = (down_ms * MS + rng.exponential(jitter_ms * MS, n)).astype(np.int64)
    hold = 50_000
    t_step = t0[step_at] - 1 if step_at is not None else None

    def peer(t: np.ndarray) -> np.ndarray:
        p = offset_ns + np.round(t * rate).astype(np.int64)
        if t_step is not None:
            p = p + np.where(t >= t_step, step_ns, 0)
        return p

    t1 = peer(t0 + up)
    t2 = peer(t0 + up + hold)
    t3 = t0 + up + hold + down
    return list(t0), list(t1), list(t2), list(t3)


params = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32 - 1),
        "drift_ppm": st.floats(-50_000, 50_000),
        "offset_ns": st.integers(-3600 * S, 3600 * S),
        "up_ms": st.floats(0.1, 80),
        "down_ms": st.floats(0.1, 80),
        "jitter_ms": st.floats(0.01, 30),
        "n": st.integers(3, 200),
    }
)


@settings(max_examples=150, deadline=None)
@given(params)
def test_no_step_is_ever_claimed_without_one(p: dict) -> None:
    rng = np.random.default_rng(p["seed"])
    kw = {k: p[k] for k in ("drift_ppm", "offset_ns", "up_ms", "down_ms", "jitter_ms")}
    assert find_probe_steps(*probes(rng, p["n"], **kw)) == []


@settings(max_examples=100, deadline=None)
@given(params, st.sampled_from([-1, 1]), st.floats(0.05, 0.9))
def test_a_step_beyond_the_round_trips_is_found_where_it_happened(
    p: dict, sign: int, where: float
) -> None:
    rng = np.random.default_rng(p["seed"])
    kw = {k: p[k] for k in ("drift_ppm", "offset_ns", "up_ms", "down_ms", "jitter_ms")}
    n = max(p["n"], 5)
    at = min(n - 1, max(1, round(where * n)))
    # big enough to beat twice the worst probe pair's round trips (delays + queueing tail)
    step_ns = sign * round((3 * (p["up_ms"] + p["down_ms"]) + 60 * p["jitter_ms"] + 50) * MS)
    (found,) = find_probe_steps(*probes(rng, n, step_ns=step_ns, step_at=at, **kw))
    assert found.index == at
    assert abs(found.step_ns - step_ns) <= found.bound_ns  # measured within its own bound
    assert np.sign(found.step_ns) == sign


def test_too_few_probes_or_mismatched_lists() -> None:
    assert find_probe_steps([1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]) == []
    with pytest.raises(ValueError, match="differ in length"):
        find_probe_steps([1, 2, 3], [1, 2], [1, 2, 3], [1, 2, 3])


def test_decomposition_fits_each_stretch_between_steps() -> None:
    """One line across a 300 ms step is off by ~150 ms on both sides; per stretch it is not."""
    rng = np.random.default_rng(3)
    drift, offset, step = 20_000.0, 7 * S, 300 * MS
    t0, t1, t2, t3 = probes(
        rng, 60, drift_ppm=drift, offset_ns=offset, up_ms=20, down_ms=20, jitter_ms=1,
        step_ns=step, step_at=30,
    )  # fmt: skip
    obs = SessionLog(
        t0_ns=0,
        sample_rate=16_000,
        frame_samples=320,
        probes=tuple(Probe(a, b, c, d) for a, b, c, d in zip(t0, t1, t2, t3, strict=True)),
    )
    clock = fit_clock(obs)
    (st_,) = clock.steps
    assert st_.index == 30 and st_.step_ns == pytest.approx(step, abs=st_.bound_ns)
    assert len(clock.segments) == 2
    rate = 1 + drift * 1e-6
    for k, extra in ((10, 0), (50, step)):  # a probe's peer receive time, each side
        true_local = round((t1[k] - offset - extra) / rate)
        seg = clock.at(t3[k], t2[k])
        assert abs(seg.fit.to_local(t1[k]) - true_local) < 15 * MS  # within the path delay
        assert seg.fit.offset_err_ns < 25 * MS
    single = fit_two_way(t2, t3, t0, t1)
    worst = max(
        abs(single.to_local(t1[k]) - round((t1[k] - offset - (step if k >= 30 else 0)) / rate))
        for k in range(60)
    )
    assert worst > 100 * MS  # what one straight line would have said
    d = clock.as_dict()
    assert d["steps"][0]["step_ms"] == pytest.approx(300, abs=st_.bound_ns / MS)
    assert [s["local_from_ns"] is None for s in d["segments"]] == [True, False]


def test_report_says_where_the_clock_stepped() -> None:
    from rich.console import Console

    from rig.cli.report import clock_fit_table

    fit = {
        "method": "envelope-two-way", "drift_ppm": 20_000.0, "offset_err_ms": 7.5,
        "rtt": {"rtt_p50_ms": 30.1}, "steps": [{"step_ms": 250.673}, {"step_ms": -40.0}],
    }  # fmt: skip
    console = Console(record=True, width=200)
    console.print(clock_fit_table([{"rollout_id": "r1", "clock_fit": fit}]))
    text = console.export_text()
    assert "clock stepped +250.7 ms, -40.0 ms; fitted per stretch" in text
