"""Small robust statistics for reports: median, percentiles, IQR, bootstrap CI, Wilson.

The bootstrap is the percentile bootstrap on a seeded `numpy.random.Generator`, so a report
is reproducible from the manifest's seed. With `clusters`, it resamples whole clusters
(scenario items) with replacement and pools their values: the CI is then "over items", which
is honest when repeats of one item are correlated.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.errors import ConfigError

Stat = Callable[[npt.NDArray[np.float64]], float]


def _arr(values: Sequence[float] | npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    a = np.asarray(values, dtype=np.float64).ravel()
    return a[np.isfinite(a)]


def percentile(values: Sequence[float] | npt.NDArray[Any], q: float) -> float | None:
    """q-th percentile (0..100, linear interpolation); None when there are no values."""
    if not 0.0 <= q <= 100.0:
        raise ConfigError(f"percentile q must be in [0, 100], got {q}")
    a = _arr(values)
    return float(np.percentile(a, q)) if a.size else None


def median(values: Sequence[float] | npt.NDArray[Any]) -> float | None:
    return percentile(values, 50.0)


def iqr(values: Sequence[float] | npt.NDArray[Any]) -> float | None:
    """Interquartile range p75 - p25; None when there are no values."""
    a = _arr(values)
    if not a.size:
        return None
    q25, q75 = np.percentile(a, [25.0, 75.0])
    return float(q75 - q25)


def _median(a: npt.NDArray[np.float64]) -> float:
    return float(np.median(a))


def bootstrap_ci(
    values: Sequence[float] | npt.NDArray[Any],
    *,
    stat: Stat = _median,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int | np.random.Generator = 0,
    clusters: Sequence[Hashable] | None = None,
) -> tuple[float, float] | None:
    """Percentile-bootstrap CI of `stat` (default: median). None without values.

    `clusters[i]` names the cluster (item) of `values[i]`; when given, whole clusters are
    resampled. A single value (or a single cluster) gives a degenerate interval.
    """
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ConfigError(f"n_resamples must be >= 1, got {n_resamples}")
    raw = np.asarray(values, dtype=np.float64).ravel()
    keep = np.isfinite(raw)
    a = raw[keep]
    if not a.size:
        return None
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    alpha = (1.0 - confidence) / 2.0
    if clusters is None:
        idx = rng.integers(0, a.size, size=(n_resamples, a.size))
        if stat is _median:
            stats = np.median(a[idx], axis=1)
        else:
            stats = np.array([stat(a[row]) for row in idx])
    else:
        if len(clusters) != raw.size:
            raise ConfigError("bootstrap_ci: clusters must have one entry per value")
        names = [c for c, k in zip(clusters, keep, strict=True) if k]
        groups: dict[Hashable, list[float]] = {}
        for name, v in zip(names, a, strict=True):
            groups.setdefault(name, []).append(float(v))
        parts = [np.asarray(g) for g in groups.values()]
        picks = rng.integers(0, len(parts), size=(n_resamples, len(parts)))
        stats = np.array([stat(np.concatenate([parts[j] for j in row])) for row in picks])
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def summarize(
    values: Sequence[float] | npt.NDArray[Any],
    *,
    seed: int | np.random.Generator = 0,
    clusters: Sequence[Hashable] | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
) -> dict[str, Any]:
    """n, median, p25, p75, IQR, p90, p95, p99 (tails for CI gates), mean, min, max and the
    bootstrap CI of the median. Percentiles interpolate linearly between order statistics:
    with few values a p99 is close to the max (and says so no better than the max does)."""
    a = _arr(values)
    if not a.size:
        return {"n": 0}
    ci = bootstrap_ci(
        values, seed=seed, clusters=clusters, confidence=confidence, n_resamples=n_resamples
    )
    q25, q50, q75, q90, q95, q99 = (
        float(x) for x in np.percentile(a, [25.0, 50.0, 75.0, 90.0, 95.0, 99.0])
    )
    return {
        "n": int(a.size),
        "median": q50,
        "p25": q25,
        "p75": q75,
        "iqr": q75 - q25,
        "p90": q90,
        "p95": q95,
        "p99": q99,
        "mean": float(a.mean()),
        "min": float(a.min()),
        "max": float(a.max()),
        "ci_low": ci[0] if ci else None,
        "ci_high": ci[1] if ci else None,
        "ci_level": confidence,
    }


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a rate k/n (None when n == 0): honest near 0 and 1 and for
    small n, where the normal approximation gives intervals outside [0, 1]."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = k / n
    den = 1.0 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * float(np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / den
    lo = 0.0 if k == 0 else max(0.0, mid - half)
    return lo, 1.0 if k == n else min(1.0, mid + half)


def rate(k: int, n: int, confidence: float = 0.95) -> dict[str, Any]:
    """A rate with its Wilson interval: {evaluated, passed, rate, ci_low, ci_high, ci}."""
    ci = wilson(k, n, confidence)
    return {
        "evaluated": n,
        "passed": k,
        "rate": k / n if n else None,
        "ci_low": ci[0] if ci else None,
        "ci_high": ci[1] if ci else None,
        "ci_method": "wilson",
    }


def tail_percentiles(
    values: Sequence[float] | npt.NDArray[Any],
    qs: Sequence[float] = (90.0, 95.0),
    *,
    seed: int | np.random.Generator = 0,
    clusters: Sequence[Hashable] | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
) -> dict[str, Any]:
    """`pQ` and its percentile-bootstrap CI (`pQ_ci`) for each q (over clusters if given)."""
    out: dict[str, Any] = {}
    for q in qs:
        key = f"p{q:g}"
        out[key] = percentile(values, q)

        def stat(a: npt.NDArray[np.float64], q: float = q) -> float:
            return float(np.percentile(a, q))

        out[f"{key}_ci"] = bootstrap_ci(
            values,
            stat=stat,
            seed=seed,
            clusters=clusters,
            confidence=confidence,
            n_resamples=n_resamples,
        )
    return out
