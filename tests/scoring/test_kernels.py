"""The timing kernels and twCRPS against scipy (a dev dependency only: rig has its own
closed forms) and against the numbers TACT publishes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.spatial.distance import jensenshannon

from rig.errors import ConfigError
from rig.scoring.kernels import (
    PRESETS,
    Domain,
    divergence,
    empirical_cdf,
    histogram,
    js_distance,
    parse_kernel,
    reference,
    tw_crps,
)

X = np.linspace(-3.0, 8.0, 2201)


@pytest.mark.parametrize("name", ["ans", "bck", "abn"])
def test_exgauss_matches_scipy(name: str) -> None:
    k = PRESETS[name]
    ref = stats.exponnorm(K=k.tau / k.sigma, loc=k.mu, scale=k.sigma)
    assert np.allclose(k.cdf(X), ref.cdf(X), atol=1e-9)
    assert np.allclose(np.exp(k.log_pdf(X)), ref.pdf(X), atol=1e-9)


@pytest.mark.parametrize("name", ["ref", "rhe", "hold"])
def test_lognormal_matches_scipy(name: str) -> None:
    k = PRESETS[name]
    ref = stats.lognorm(s=k.sigma, loc=k.shift, scale=k.median - k.shift)
    assert np.allclose(k.cdf(X), ref.cdf(X), atol=1e-9)
    assert np.allclose(np.exp(k.log_pdf(X)), ref.pdf(X), atol=1e-9)
    assert float(k.cdf(np.array([k.median]))[0]) == pytest.approx(0.5)


def test_bck_kernel_is_the_published_one() -> None:
    # TACT IV-B: "the bck mode of -0.19 s places 72% of onset mass inside the ongoing turn"
    k = PRESETS["bck"]
    x = np.linspace(-1.0, 1.0, 20001)
    assert x[np.argmax(k.log_pdf(x))] == pytest.approx(-0.19, abs=0.005)
    assert float(k.cdf(np.array([0.0]))[0]) == pytest.approx(0.72, abs=0.005)


def test_tw_crps_is_the_integral() -> None:
    d = Domain()
    ref = reference(PRESETS["ans"], d)
    k = PRESETS["ans"]
    lo, hi = k.cdf(np.array([-2.0, 5.0]))

    def H(t: float) -> float:  # noqa: N802 - the paper's name
        return (1 - k.beta) * (float(k.cdf(np.array([t]))[0]) - lo) / (hi - lo)

    f_max = math.exp(float(np.max(k.log_pdf(ref.t))))

    def w(t: float) -> float:
        f = math.exp(float(k.log_pdf(np.array([t]))[0]))
        return (1 - 0.02) * (f / f_max) ** 0.7 + 0.02

    for y in (0.3, -1.0, None):

        def integrand(t: float, y: float | None = y) -> float:
            step = 0.0 if y is None or t < y else 1.0
            return w(t) * (H(t) - step) ** 2

        pts = [y] if y is not None else None
        want, _ = integrate.quad(integrand, -2.0, 5.0, points=pts, limit=400)
        assert tw_crps(ref, ref.H, y) == pytest.approx(want, rel=1e-3)
    want_w, _ = integrate.quad(w, -2.0, 5.0, limit=400)
    assert ref.W == pytest.approx(want_w, rel=1e-4)
    # the no-response mass is exactly beta at the horizon
    assert ref.H[-1] == pytest.approx(1 - k.beta)


def test_divergence_is_zero_only_at_the_reference() -> None:
    ref = reference(PRESETS["bck"], Domain())
    assert divergence(ref, ref.H) == 0.0
    assert divergence(ref, empirical_cdf(ref.t, [0.2] * 10)) > 0.01


def test_js_distance_by_hand_and_against_scipy() -> None:
    d = Domain(pre_s=0.0, horizon_s=1.0)
    a = histogram([0.25] * 4, d, 500.0)  # all in bin [0, 0.5)
    b = histogram([None] * 4, d, 500.0)  # all no response
    assert js_distance(a, a) == 0.0
    assert js_distance(a, b) == pytest.approx(1.0)  # disjoint: the maximum, base 2
    # p = (1, 0), q = (1/2, 1/2): m = (3/4, 1/4); KL(p||m) = log2(4/3) = 0.41504,
    # KL(q||m) = (log2(2/3) + log2(2)) / 2 = 0.20752; JSD = 0.31128, distance 0.55793
    p = histogram([0.25, 0.25], d, 500.0)
    q = histogram([0.25, None], d, 500.0)
    assert js_distance(p, q) == pytest.approx(0.55793, abs=1e-5)
    assert js_distance(p, q) == pytest.approx(float(jensenshannon(p, q, base=2)))


def test_kernel_specs() -> None:
    assert parse_kernel("ans:beta=0.2").beta == 0.2
    k = parse_kernel("lognormal:median=1.5,sigma=0.3,beta=0.4")
    assert (k.family, k.median, k.sigma) == ("lognormal", 1.5, 0.3)
    with pytest.raises(ConfigError, match="beta"):
        parse_kernel("exgauss:mu=0.1,sigma=0.1,tau=0.1")
    with pytest.raises(ConfigError, match="not a preset"):
        parse_kernel("gamma:beta=0.2")
    with pytest.raises(ConfigError, match="beta must be"):
        parse_kernel("ans:beta=1.5")
