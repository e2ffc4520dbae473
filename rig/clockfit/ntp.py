"""Fit a peer clock from NTP-style four-timestamp exchanges, keeping the fastest exchanges.

How this works
--------------
One exchange: we send at t0 (local), the peer receives at t1 and answers at t2 (peer
clock), we receive at t3 (local). Mapped through the true line f (local = f(peer)):

    f(t1) = t0 + d_up        f(t2) = t3 - d_down

so the peer's midpoint (t1 + t2) / 2 happened, on our clock, at (t0 + t3) / 2 plus
(d_up - d_down) / 2. Each exchange is a point (peer_mid, local_mid) off the line by half
the path asymmetry, which is at most half the path delay

    delay = (t3 - t0) - (t2 - t1) * rate        (rate = d local / d peer),

a hard bound whatever the asymmetry. Note the sign: our `offset_ns` is local - peer, the
opposite of RFC 5905's theta.

Queuing inflates delay and asymmetry together, so we keep the fastest exchanges: they
are cut into windows of consecutive sends and in each the lowest-delay fraction is kept
(at least one), so a slow stretch of path cannot leave a window empty or bias the
slope. Through the kept points a Huber-weighted line (IRLS) gives offset and skew; the
delays are then recomputed with the fitted rate (a peer hold of 10 ms at 5 % drift is
0.5 ms) and the fit repeated.

Uncertainty: the offset error is the fit's own bound on asymmetry, sum_i |L_i| delay_i / 2
(L_i the weight of exchange i in the offset at the reference), plus two standard errors
from the residuals; the drift error is three standard errors of the slope (two covered
only ~85 % in bench/clockfit.py: the kept exchanges are not independent draws) (a path asymmetry
that changes during the run would bias it further; the residuals show that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rig.clockfit.fit import Timestamps, as_ns_array, drift_reason
from rig.clockfit.mapping import PPM, ClockMap, FitRefusal, join_reasons
from rig.core.units import NS_PER_S

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]

METHOD_NTP = "ntp"
DEFAULT_KEEP_FRACTION = 0.25
DEFAULT_WINDOWS = 16
HUBER_K = 1.345


@dataclass(frozen=True, slots=True)
class NtpSample:
    """One exchange reduced: where its midpoint sits on both clocks, its offset and delay."""

    peer_mid_ns: float
    local_mid_ns: float
    offset_ns: float
    delay_ns: float

    @property
    def offset_err_ns(self) -> float:
        """Half the path delay: the most the path asymmetry can move `offset_ns`."""
        return max(self.delay_ns, 0.0) / 2


def ntp_sample(t0_ns: int, t1_ns: int, t2_ns: int, t3_ns: int, rate: float = 1.0) -> NtpSample:
    """Offset (local - peer) and path delay of one exchange; `rate` scales the peer hold."""
    local_mid = (t0_ns + t3_ns) / 2
    peer_mid = (t1_ns + t2_ns) / 2
    return NtpSample(
        peer_mid_ns=peer_mid,
        local_mid_ns=local_mid,
        offset_ns=((t0_ns - t1_ns) + (t3_ns - t2_ns)) / 2,
        delay_ns=(t3_ns - t0_ns) - (t2_ns - t1_ns) * rate,
    )


def fit_ntp(
    t0_ns: Timestamps,
    t1_ns: Timestamps,
    t2_ns: Timestamps,
    t3_ns: Timestamps,
    *,
    keep_fraction: float = DEFAULT_KEEP_FRACTION,
    n_windows: int = DEFAULT_WINDOWS,
    min_samples: int = 8,
    min_span_ns: int = NS_PER_S,
) -> ClockMap | FitRefusal:
    """Offset and skew from four-timestamp exchanges (t0, t3 local; t1, t2 peer)."""
    if not 0 < keep_fraction <= 1:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    if n_windows < 1:
        raise ValueError(f"n_windows must be >= 1, got {n_windows}")
    t0 = as_ns_array(t0_ns, "t0_ns")
    t1 = as_ns_array(t1_ns, "t1_ns")
    t2 = as_ns_array(t2_ns, "t2_ns")
    t3 = as_ns_array(t3_ns, "t3_ns")
    if not t0.shape == t1.shape == t2.shape == t3.shape:
        raise ValueError("t0_ns, t1_ns, t2_ns, t3_ns must have the same length")
    good = (t3 >= t0) & (t2 >= t1)
    n_bad = int(good.size - np.count_nonzero(good))
    dropped = f"dropped {n_bad} exchanges with t3 < t0 or t2 < t1" if n_bad else None
    t0, t1, t2, t3 = t0[good], t1[good], t2[good], t3[good]
    n = int(t0.size)
    if n == 0:
        return FitRefusal(METHOD_NTP, n_bad, join_reasons("no usable exchanges", dropped) or "")

    # Re-base in integers; halves are exact in float64.
    p0, l0 = int(t1.min()), int(t0.min())
    x = ((t1 - np.int64(p0)) + (t2 - np.int64(p0))).astype(np.float64) / 2
    y = ((t0 - np.int64(l0)) + (t3 - np.int64(l0))).astype(np.float64) / 2
    z = y - x
    send_order = np.argsort(t0, kind="stable")
    rtt = (t3 - t0).astype(np.float64)
    hold = (t2 - t1).astype(np.float64)
    peer_first, peer_last = int(t1.min()), int(t2.max())
    span_ns = peer_last - peer_first
    x_ref = (peer_first - p0) + span_ns // 2

    why_no_drift = drift_reason(n, span_ns, min_samples, min_span_ns)
    fit_slope = why_no_drift is None
    rate = 1.0
    for _ in range(2 if fit_slope else 1):
        delay = np.maximum(rtt - hold * rate, 0.0)
        keep = _select_fastest(send_order, delay, keep_fraction, n_windows)
        line = _huber_line(x[keep], z[keep], x_ref, fit_slope)
        rate = 1.0 + line.slope
        if not rate > 0:
            return FitRefusal(
                METHOD_NTP, n, f"fitted rate {rate:.6g} <= 0: peer stamps run backwards"
            )
    asym_bound = float(np.sum(np.abs(line.lever) * delay[keep] / 2))
    offset_err = asym_bound + 2 * line.se_at_ref
    drift_err = 3 * line.se_slope * PPM / rate**2 if fit_slope else None
    resid = np.abs(line.resid)
    p50, p95 = np.percentile(resid, [50, 95])
    v_ref = line.at_ref
    return ClockMap(
        local_ref_ns=l0 + x_ref + round(v_ref),
        peer_ref_ns=p0 + x_ref,
        rate=rate,
        method=METHOD_NTP,
        n_samples=n,
        peer_first_ns=peer_first,
        peer_last_ns=peer_last,
        residual_p50_ns=float(p50),
        residual_p95_ns=float(p95),
        residual_max_ns=float(resid.max()),
        offset_err_ns=offset_err,
        drift_err_ppm=drift_err,
        split=True,
        drift_fitted=fit_slope,
        reason=join_reasons(why_no_drift, dropped),
    )


def _select_fastest(order: IntArray, delay: FloatArray, keep: float, n_windows: int) -> BoolArray:
    """Per window of consecutive exchanges (in send order), those at or below its delay
    quantile. Equal-count windows in send order, not equal-width windows in peer time: an
    exchange delayed by minutes would otherwise sit alone in a window and be kept."""
    n = order.size
    windows = max(1, min(n_windows, n // 4))
    mask = np.zeros(n, dtype=bool)
    for members in np.array_split(order, windows):
        q = np.quantile(delay[members], keep, method="lower")
        mask[members[delay[members] <= q]] = True
    return mask


@dataclass(frozen=True, slots=True)
class _Line:
    at_ref: float
    slope: float
    se_at_ref: float
    se_slope: float
    lever: FloatArray  # weight of each point in at_ref (sums to 1)
    resid: FloatArray


def _huber_line(x: FloatArray, z: FloatArray, x_ref: float, fit_slope: bool) -> _Line:
    """Huber-weighted line z = at_ref + slope * (x - x_ref), by iteratively reweighted LS."""
    n = x.size
    xc = x - x_ref
    w = np.ones(n)
    at_ref, slope = float(np.median(z)), 0.0
    for _ in range(30):
        at_ref_new, slope_new = _weighted_ls(xc, z, w, fit_slope)
        resid = z - (at_ref_new + slope_new * xc)
        mad = float(np.median(np.abs(resid - np.median(resid))))
        scale = 1.4826 * mad
        converged = abs(at_ref_new - at_ref) < 1e-3 and abs(slope_new - slope) < 1e-12
        at_ref, slope = at_ref_new, slope_new
        if scale <= 0 or converged:
            break
        w = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(resid), 1e-300))
    at_ref, slope = _weighted_ls(xc, z, w, fit_slope)
    resid = z - (at_ref + slope * xc)
    sw = float(w.sum())
    xm = float(np.sum(w * xc) / sw)
    sxx = float(np.sum(w * (xc - xm) ** 2)) if fit_slope else 0.0
    dof = n - (2 if fit_slope else 1)
    sigma = math.sqrt(float(np.sum(w * resid**2)) / dof) if dof > 0 else 0.0
    if fit_slope and sxx > 0:
        lever = w / sw + w * (xc - xm) * (0.0 - xm) / sxx
        se_at_ref = sigma * math.sqrt(1 / sw + xm**2 / sxx)
        se_slope = sigma / math.sqrt(sxx)
    else:
        lever = w / sw
        se_at_ref = sigma / math.sqrt(sw)
        se_slope = math.inf
    return _Line(at_ref, slope, se_at_ref, se_slope, lever, resid)


def _weighted_ls(
    xc: FloatArray, z: FloatArray, w: FloatArray, fit_slope: bool
) -> tuple[float, float]:
    sw = float(w.sum())
    zm = float(np.sum(w * z) / sw)
    if not fit_slope:
        return zm, 0.0
    xm = float(np.sum(w * xc) / sw)
    sxx = float(np.sum(w * (xc - xm) ** 2))
    if sxx <= 0:
        return zm, 0.0
    slope = float(np.sum(w * (xc - xm) * (z - zm)) / sxx)
    return zm - slope * xm, slope
