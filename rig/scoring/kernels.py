"""Reference timing kernels and the threshold-weighted CRPS of TACT (section IV).

How this works
--------------
Offsets live on the domain T = [-pre_s, horizon_s] around a decision point (TACT: T_a =
2 s, T_h = 5 s; negative offsets are onsets in overlap with the ongoing turn). A
reference law is h = (1 - beta) f + beta * no-response: `f` an ex-Gaussian (mu, sigma, tau)
or a shifted log-normal (median, sigma, shift), truncated to T and renormalised, so that
beta is exactly the no-response mass. Its sub-probability CDF on T is
H(t) = (1 - beta) (F(t) - F(-pre)) / (F(horizon) - F(-pre)).

The weight is w(t) = (1 - eps) (f(t) / sup f)^gamma + eps (gamma 0.7, eps 0.02), and the
score of a forecast CDF P against an outcome y is

    twCRPS(P, y) = integral over T of w(t) (P(t) - 1[y <= t])^2 dt,

with 1[y <= t] = 0 everywhere for no response. Everything is evaluated on a grid of
`grid_ms` (trapezoid rule): tests/scoring/test_kernels.py checks the closed forms against
scipy and the integral against quadrature. The closed forms are written here with math.erfc
so that rig needs no scipy at run time.

Presets are TACT's six intents: the ex-Gaussian parameters and every beta are the paper's;
for the three log-normal intents the paper gives only the median, so their `sigma` (0.5)
and `shift` (0) are rig's choice, recorded with every result and overridable.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.errors import ConfigError

Arr = npt.NDArray[np.float64]
_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True, slots=True)
class Kernel:
    """A reference law: `family` exgauss (mu, sigma, tau) or lognormal (median, sigma,
    shift), all in seconds but lognormal's sigma (log space), and beta."""

    family: str
    beta: float
    mu: float = 0.0
    sigma: float = 0.1
    tau: float = 0.1
    median: float = 1.0
    shift: float = 0.0
    name: str = ""

    def __post_init__(self) -> None:
        if self.family not in ("exgauss", "lognormal"):
            raise ConfigError(f"kernel family must be exgauss or lognormal, got {self.family!r}")
        if not 0.0 <= self.beta < 1.0:
            raise ConfigError(f"kernel beta must be in [0, 1), got {self.beta}")
        if self.sigma <= 0 or (self.family == "exgauss" and self.tau <= 0):
            raise ConfigError("kernel sigma and tau must be > 0")
        if self.family == "lognormal" and self.median <= self.shift:
            raise ConfigError("lognormal kernel: median must be above shift")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        keep = ("mu", "sigma", "tau") if self.family == "exgauss" else ("median", "sigma", "shift")
        return {k: v for k, v in d.items() if k in (*keep, "family", "beta", "name")}

    def log_pdf(self, x: Arr) -> Arr:
        if self.family == "exgauss":
            return _exgauss_log_pdf(x, self.mu, self.sigma, self.tau)
        return _lognormal_log_pdf(x, self.median, self.sigma, self.shift)

    def cdf(self, x: Arr) -> Arr:
        if self.family == "exgauss":
            return _exgauss_cdf(x, self.mu, self.sigma, self.tau)
        return _lognormal_cdf(x, self.median, self.sigma, self.shift)


#: TACT's intents (section IV-B): ans, bck, abn ex-Gaussian; ref, rhe, hold log-normal
PRESETS: dict[str, Kernel] = {
    "ans": Kernel("exgauss", 0.05, mu=0.16, sigma=0.11, tau=0.24, name="ans"),
    "bck": Kernel("exgauss", 0.45, mu=-0.32, sigma=0.18, tau=0.20, name="bck"),
    "abn": Kernel("exgauss", 0.50, mu=1.95, sigma=0.50, tau=0.80, name="abn"),
    "ref": Kernel("lognormal", 0.40, median=1.9, sigma=0.5, name="ref"),
    "rhe": Kernel("lognormal", 0.85, median=2.6, sigma=0.5, name="rhe"),
    "hold": Kernel("lognormal", 0.90, median=3.0, sigma=0.5, name="hold"),
}


def parse_kernel(spec: str) -> Kernel:
    """`ans` (a preset), `ans:beta=0.1` (a preset changed), or
    `exgauss:mu=0.16,sigma=0.11,tau=0.24,beta=0.05` / `lognormal:median=1.9,sigma=0.5,beta=0.4`."""
    head, _, rest = spec.strip().partition(":")
    fields: dict[str, float] = {}
    for part in filter(None, (x.strip() for x in rest.split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise ConfigError(f"kernel {spec!r}: {part!r} is not KEY=VALUE")
        try:
            fields[k.strip()] = float(v)
        except ValueError as exc:
            raise ConfigError(f"kernel {spec!r}: {k.strip()} must be a number") from exc
    allowed = {"beta", "mu", "sigma", "tau", "median", "shift"}
    if set(fields) - allowed:
        raise ConfigError(f"kernel {spec!r}: unknown field(s) {sorted(set(fields) - allowed)}")
    if head in PRESETS:
        base = asdict(PRESETS[head])
        return Kernel(**{**base, **fields})
    if head in ("exgauss", "lognormal"):
        if "beta" not in fields:
            raise ConfigError(f"kernel {spec!r}: give its no-response mass beta")
        return Kernel(head, name=spec.strip(), **fields)
    raise ConfigError(
        f"kernel {spec!r}: not a preset ({', '.join(PRESETS)}) nor exgauss:/lognormal:"
    )


# -- closed forms ----------------------------------------------------------------------------


def _log_phi(z: Arr) -> Arr:
    """log of the standard normal CDF, stable far into the left tail."""
    out = np.empty_like(z)
    tail = z < -30.0
    zz = z[~tail]
    out[~tail] = np.log(0.5 * np.vectorize(math.erfc)(-zz / _SQRT2))
    zt = z[tail]
    out[tail] = -0.5 * zt * zt - np.log(-zt) - _LOG_SQRT_2PI + np.log1p(-1.0 / (zt * zt))
    return out


def _phi(z: Arr) -> Arr:
    return np.asarray(0.5 * np.vectorize(math.erfc)(-np.asarray(z) / _SQRT2), dtype=np.float64)


def _exgauss_log_pdf(x: Arr, mu: float, sigma: float, tau: float) -> Arr:
    z = (x - mu) / sigma - sigma / tau
    return -math.log(tau) + sigma * sigma / (2 * tau * tau) - (x - mu) / tau + _log_phi(z)


def _exgauss_cdf(x: Arr, mu: float, sigma: float, tau: float) -> Arr:
    u = (x - mu) / sigma
    log_tail = sigma * sigma / (2 * tau * tau) - (x - mu) / tau + _log_phi(u - sigma / tau)
    return np.clip(_phi(u) - np.exp(log_tail), 0.0, 1.0)


def _lognormal_log_pdf(x: Arr, median: float, sigma: float, shift: float) -> Arr:
    out = np.full_like(x, -np.inf)
    ok = x > shift
    d = x[ok] - shift
    z = (np.log(d) - math.log(median - shift)) / sigma
    out[ok] = -np.log(d) - math.log(sigma) - _LOG_SQRT_2PI - 0.5 * z * z
    return out


def _lognormal_cdf(x: Arr, median: float, sigma: float, shift: float) -> Arr:
    out = np.zeros_like(x)
    ok = x > shift
    out[ok] = _phi((np.log(x[ok] - shift) - math.log(median - shift)) / sigma)
    return out


# -- the score -------------------------------------------------------------------------------


def _trap(y: Arr, t: Arr) -> float:
    """Trapezoid rule (numpy's is `trapz` before 2.0 and `trapezoid` after)."""
    return float(np.sum((y[1:] + y[:-1]) * np.diff(t)) / 2.0)


@dataclass(frozen=True, slots=True)
class Domain:
    """The offset domain and the weight's shape (TACT defaults)."""

    pre_s: float = 2.0
    horizon_s: float = 5.0
    gamma: float = 0.7
    eps: float = 0.02
    grid_ms: float = 1.0

    def grid(self) -> Arr:
        n = round((self.pre_s + self.horizon_s) * 1000.0 / self.grid_ms) + 1
        return np.linspace(-self.pre_s, self.horizon_s, n)


@dataclass(frozen=True, slots=True)
class Reference:
    """A kernel evaluated on a domain's grid: H (sub-CDF), w (weight) and W = integral w."""

    kernel: Kernel
    t: Arr
    H: Arr
    w: Arr
    W: float


def reference(k: Kernel, d: Domain) -> Reference:
    t = d.grid()
    lo, hi = k.cdf(np.array([-d.pre_s, d.horizon_s]))
    mass = float(hi - lo)
    if mass <= 1e-12:
        raise ConfigError(f"kernel {k.name or k.family}: no mass inside the window")
    H = (1.0 - k.beta) * np.clip((k.cdf(t) - lo) / mass, 0.0, 1.0)
    lp = k.log_pdf(t)
    u = np.exp(d.gamma * (lp - np.max(lp)))
    w = (1.0 - d.eps) * u + d.eps
    return Reference(k, t, H, w, float(_trap(w, t)))


def _cumtrap(y: Arr, t: Arr) -> Arr:
    return np.concatenate([[0.0], np.cumsum((y[1:] + y[:-1]) * np.diff(t) / 2.0)])


def tw_crps(ref: Reference, P: Arr, y: float | None) -> float:
    """twCRPS of the forecast CDF `P` (on ref.t) against outcome `y` (None: no response).
    The outcome's step is placed exactly (not on the grid): the integral of w P^2 below y
    plus the integral of w (P - 1)^2 above it."""
    below = _cumtrap(ref.w * P**2, ref.t)
    if y is None or y >= ref.t[-1]:
        return float(below[-1])
    above = _cumtrap(ref.w * (P - 1.0) ** 2, ref.t)
    y = max(y, float(ref.t[0]))
    return float(np.interp(y, ref.t, below) + above[-1] - np.interp(y, ref.t, above))


def empirical_cdf(t: Arr, ys: list[float | None]) -> Arr:
    """The sub-probability CDF of outcomes (no response: mass at no time)."""
    n = len(ys)
    finite = np.sort(np.asarray([y for y in ys if y is not None], dtype=np.float64))
    if not n:
        return np.zeros_like(t)
    return np.searchsorted(finite, t, side="right") / n


def divergence(ref: Reference, P: Arr) -> float:
    """d(P || h) = integral w (P - H)^2: 0 only when P is the reference law."""
    return float(_trap(ref.w * (P - ref.H) ** 2, ref.t))


def histogram(ys: list[float | None], d: Domain, bin_ms: float) -> Arr:
    """Onset offsets in bins over T plus a last no-response bin, as probabilities."""
    edges = np.arange(-d.pre_s, d.horizon_s + 1e-9, bin_ms / 1000.0)
    if edges[-1] < d.horizon_s - 1e-9:
        edges = np.append(edges, d.horizon_s)
    finite = [y for y in ys if y is not None]
    counts, _ = np.histogram(np.clip(finite, -d.pre_s, d.horizon_s), bins=edges)
    out = np.append(counts.astype(np.float64), float(len(ys) - len(finite)))
    return out / out.sum() if out.sum() else out


def js_distance(p: Arr, q: Arr) -> float:
    """Jensen-Shannon distance, base 2 (in [0, 1]): the square root of the divergence."""
    m = 0.5 * (p + q)

    def kl(a: Arr) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return math.sqrt(max(0.0, 0.5 * kl(p) + 0.5 * kl(q)))
