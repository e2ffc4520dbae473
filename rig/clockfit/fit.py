"""Fit a peer clock onto the shared clock from one-way timestamp pairs (lower/upper envelope).

How this works
--------------
Picture every sample as a point (peer_ns, local_ns). The true mapping is a line
local = f(peer). A downlink message is stamped by the peer at send and by us at arrival,
so its point sits *above* the line by its one-way delay d >= d_min >= 0; queuing only ever
adds. The line that hugs the cloud from below (the LP lower envelope, `envelope.py`) is
therefore f + d_min, and its slope is f's slope, untouched by queuing. Least squares would
instead follow the mean delay, and its slope follows any trend in the queue.

Uplink samples (local send, peer receive) mirror this: the point (peer_receive, local_send)
sits *below* the line by the uplink delay, and the upper envelope is f - d_min_up.

One direction alone cannot tell offset from d_min: its map is honest about the slope and
about "offset + minimum delay", and says so (`split=False`, `reason`). With both directions
the true line lies between the two envelopes; their midpoint is the estimate and half the
gap (the minimum round trip, d_min_down + d_min_up) its uncertainty (`combine_two_way`).
A minimum RTT measured on the same path bounds d_min from one side too (`bound_with_rtt`).

Precision: references are subtracted in int64 first (peer from the first peer stamp, local
from the matching local stamp), and the fit runs on z = local - peer in those small
coordinates, where every integer is exact in float64. Uncertainty: the fit is repeated on
K interleaved subsets; an envelope's error shrinks like 1/n, so a subset (n/K points) errs
about K times more than the full fit, and the mean subset disagreement is roughly (K-1)
times the full fit's mean error. We report 1.5 times it (about 4.5 mean errors), which
covered the truth in ~95 % of trials in bench/clockfit.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from rig.clockfit.envelope import lower_envelope_line, upper_envelope_line
from rig.clockfit.mapping import PPM, ClockMap, FitRefusal, join_reasons
from rig.core.units import NS_PER_MS, NS_PER_S

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Timestamps = Sequence[int] | npt.NDArray[np.integer]

DEFAULT_MIN_SAMPLES = 8
DEFAULT_MIN_SPAN_NS = NS_PER_S
SUBSETS = 4
ERR_SCALE = 1.5  # subset disagreement -> reported error; ~95 % coverage in bench/clockfit.py

METHOD_DOWN = "envelope-down"
METHOD_UP = "envelope-up"
METHOD_TWO_WAY = "envelope-two-way"

REASON_DOWN = (
    "one-way downlink samples only: offset includes the minimum downlink delay "
    "(the map gives the earliest possible arrival, late by d_min)"
)
REASON_UP = (
    "one-way uplink samples only: offset excludes the minimum uplink delay "
    "(the map gives the latest possible send, early by d_min)"
)


def as_ns_array(values: Timestamps, name: str) -> IntArray:
    """Integer ns as int64, refusing floats (they would silently lose ns at epoch scale)."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of integer ns, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: timestamps must be integer ns, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def drift_reason(n: int, span_ns: int, min_samples: int, min_span_ns: int) -> str | None:
    """Why drift cannot be fitted from n samples over span_ns (None when it can)."""
    if n < min_samples:
        return f"{n} samples < {min_samples} needed to fit drift; assumed 0 ppm"
    if span_ns < min_span_ns:
        return (
            f"samples span {span_ns / NS_PER_S:.3f} s < {min_span_ns / NS_PER_S:.3f} s "
            "needed to fit drift; assumed 0 ppm"
        )
    return None


def fit_downlink(
    peer_send_ns: Timestamps,
    local_arrival_ns: Timestamps,
    *,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    min_span_ns: int = DEFAULT_MIN_SPAN_NS,
) -> ClockMap | FitRefusal:
    """Lower-envelope fit of downlink samples: the map is late by the minimum downlink delay."""
    peer = as_ns_array(peer_send_ns, "peer_send_ns")
    local = as_ns_array(local_arrival_ns, "local_arrival_ns")
    return _envelope_fit(peer, local, False, METHOD_DOWN, REASON_DOWN, min_samples, min_span_ns)


def fit_uplink(
    local_send_ns: Timestamps,
    peer_receive_ns: Timestamps,
    *,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    min_span_ns: int = DEFAULT_MIN_SPAN_NS,
) -> ClockMap | FitRefusal:
    """Upper-envelope fit of uplink samples: the map is early by the minimum uplink delay."""
    local = as_ns_array(local_send_ns, "local_send_ns")
    peer = as_ns_array(peer_receive_ns, "peer_receive_ns")
    return _envelope_fit(peer, local, True, METHOD_UP, REASON_UP, min_samples, min_span_ns)


def fit_two_way(
    peer_send_ns: Timestamps,
    local_arrival_ns: Timestamps,
    local_send_ns: Timestamps,
    peer_receive_ns: Timestamps,
    *,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    min_span_ns: int = DEFAULT_MIN_SPAN_NS,
) -> ClockMap | FitRefusal:
    """Both directions: `fit_downlink` and `fit_uplink`, then `combine_two_way`."""
    down = fit_downlink(
        peer_send_ns, local_arrival_ns, min_samples=min_samples, min_span_ns=min_span_ns
    )
    up = fit_uplink(
        local_send_ns, peer_receive_ns, min_samples=min_samples, min_span_ns=min_span_ns
    )
    if isinstance(down, FitRefusal):
        return FitRefusal(METHOD_TWO_WAY, down.n_samples + _n(up), f"downlink: {down.reason}")
    if isinstance(up, FitRefusal):
        return FitRefusal(METHOD_TWO_WAY, down.n_samples + up.n_samples, f"uplink: {up.reason}")
    return combine_two_way(down, up)


def combine_two_way(down: ClockMap, up: ClockMap) -> ClockMap:
    """Midpoint of a downlink (lower) and an uplink (upper) envelope map, ± half their gap.

    The true line lies between the two: the downlink map is late by d_min_down, the uplink
    map early by d_min_up, so the gap is the minimum round trip and half of it bounds the
    midpoint's error whatever the asymmetry of the path.
    """
    first = min(down.peer_first_ns, up.peer_first_ns)
    last = max(down.peer_last_ns, up.peer_last_ns)
    ref = first + (last - first) // 2
    d_ns = down.to_local(ref)
    u_ns = up.to_local(ref)
    gap_ns = d_ns - u_ns
    reasons: list[str | None] = []
    if gap_ns < 0:
        reasons.append(
            f"downlink and uplink envelopes cross (gap {gap_ns / NS_PER_MS:.3f} ms): "
            "timestamps inconsistent or the peer clock is not linear"
        )
    if down.drift_fitted and up.drift_fitted:
        rate = 0.5 * (down.rate + up.rate)
        d_err = 0.5 * ((down.drift_err_ppm or 0.0) + (up.drift_err_ppm or 0.0))
        drift_err: float | None = max(d_err, 0.5 * abs(down.drift_ppm - up.drift_ppm))
        drift_fitted = True
    elif down.drift_fitted or up.drift_fitted:
        fitted = down if down.drift_fitted else up
        rate, drift_err, drift_fitted = fitted.rate, fitted.drift_err_ppm, True
    else:
        rate, drift_err, drift_fitted = 1.0, None, False
        reasons.append("neither direction has enough samples or span to fit drift; assumed 0 ppm")
    return ClockMap(
        local_ref_ns=u_ns + gap_ns // 2,
        peer_ref_ns=ref,
        rate=rate,
        method=METHOD_TWO_WAY,
        n_samples=down.n_samples + up.n_samples,
        peer_first_ns=first,
        peer_last_ns=last,
        residual_p50_ns=max(down.residual_p50_ns, up.residual_p50_ns),
        residual_p95_ns=max(down.residual_p95_ns, up.residual_p95_ns),
        residual_max_ns=max(down.residual_max_ns, up.residual_max_ns),
        offset_err_ns=abs(gap_ns) / 2,
        drift_err_ppm=drift_err,
        split=gap_ns >= 0,
        drift_fitted=drift_fitted,
        reason=join_reasons(*reasons),
    )


def bound_with_rtt(one_way: ClockMap, min_rtt_ns: int) -> ClockMap:
    """Split a one-way map with a minimum round trip measured on the same path.

    Any round trip is at least the one-way minimum delay, so the true line lies within
    min_rtt of a one-way envelope (below the downlink one, above the uplink one). The
    estimate moves half of min_rtt towards the truth, and min_rtt/2 joins the error.
    """
    if min_rtt_ns < 0:
        raise ValueError(f"min_rtt_ns must be >= 0, got {min_rtt_ns}")
    if one_way.method == METHOD_DOWN:
        shift_ns = -(min_rtt_ns // 2)
    elif one_way.method == METHOD_UP:
        shift_ns = min_rtt_ns // 2
    else:
        raise ValueError(f"bound_with_rtt needs a one-way envelope map, got {one_way.method!r}")
    drift_why = None if one_way.drift_fitted else "drift not fitted; assumed 0 ppm"
    return ClockMap(
        local_ref_ns=one_way.local_ref_ns + shift_ns,
        peer_ref_ns=one_way.peer_ref_ns,
        rate=one_way.rate,
        method=one_way.method + "+rtt",
        n_samples=one_way.n_samples,
        peer_first_ns=one_way.peer_first_ns,
        peer_last_ns=one_way.peer_last_ns,
        residual_p50_ns=one_way.residual_p50_ns,
        residual_p95_ns=one_way.residual_p95_ns,
        residual_max_ns=one_way.residual_max_ns,
        offset_err_ns=min_rtt_ns / 2 + one_way.offset_err_ns,
        drift_err_ppm=one_way.drift_err_ppm,
        split=True,
        drift_fitted=one_way.drift_fitted,
        reason=drift_why,
    )


# --- internals ---------------------------------------------------------------------------


def _n(fit: ClockMap | FitRefusal) -> int:
    return fit.n_samples


def _envelope_fit(
    peer: IntArray,
    local: IntArray,
    upper: bool,
    method: str,
    split_reason: str,
    min_samples: int,
    min_span_ns: int,
) -> ClockMap | FitRefusal:
    if peer.shape != local.shape:
        raise ValueError(f"{method}: {peer.size} peer stamps but {local.size} local stamps")
    n = int(peer.size)
    if n == 0:
        return FitRefusal(method, 0, "no samples")
    i0 = int(np.argmin(peer))
    p0, l0 = int(peer[i0]), int(local[i0])
    x_int = peer - np.int64(p0)
    span_ns = int(x_int.max())
    x = x_int.astype(np.float64)
    z = ((local - np.int64(l0)) - x_int).astype(np.float64)  # local - peer, both re-based
    # the reference is the samples' mean peer time: the LP line is evaluated there, so that is
    # where it is one-sided (never past the true min-delay line); elsewhere a slope error adds
    x_ref = round(float(x.mean()))

    why_no_drift = drift_reason(n, span_ns, min_samples, min_span_ns)
    fit_slope = why_no_drift is None
    a, c = _line(x, z, upper, fit_slope)
    if not 1.0 + c > 0:
        return FitRefusal(
            method, n, f"fitted rate {1.0 + c:.6g} <= 0: peer stamps run backwards against ours"
        )
    v_ref = a + c * x_ref

    # Uncertainty from K interleaved subsets (in peer-time order).
    order = np.argsort(x_int, kind="stable")
    k_sets = min(SUBSETS, n)
    v_subs: list[float] = []
    c_subs: list[float] = []
    for k in range(k_sets):
        sub = order[k::k_sets]
        xs, zs = x[sub], z[sub]
        slope_ok = fit_slope and sub.size >= 2 and float(xs.min()) < float(xs.max())
        if fit_slope and not slope_ok:
            continue
        a_k, c_k = _line(xs, zs, upper, slope_ok)
        v_subs.append(a_k + c_k * x_ref)
        c_subs.append(c_k)
    if k_sets >= 2 and v_subs:
        offset_err = ERR_SCALE * float(np.mean(np.abs(np.array(v_subs) - v_ref)))
    else:
        offset_err = math.inf
    drift_err: float | None = None
    if fit_slope:
        rate = 1.0 + c
        drift_err = (
            ERR_SCALE * float(np.mean(np.abs(np.array(c_subs) - c))) * PPM / rate**2
            if c_subs
            else math.inf
        )

    resid = z - (a + c * x)
    if upper:
        resid = -resid
    p50, p95 = np.percentile(resid, [50, 95])
    return ClockMap(
        local_ref_ns=l0 + x_ref + round(v_ref),
        peer_ref_ns=p0 + x_ref,
        rate=1.0 + c,
        method=method,
        n_samples=n,
        peer_first_ns=p0,
        peer_last_ns=p0 + span_ns,
        residual_p50_ns=float(p50),
        residual_p95_ns=float(p95),
        residual_max_ns=float(resid.max()),
        offset_err_ns=offset_err,
        drift_err_ppm=drift_err,
        split=False,
        drift_fitted=fit_slope,
        reason=join_reasons(split_reason, why_no_drift),
    )


def _line(x: FloatArray, z: FloatArray, upper: bool, fit_slope: bool) -> tuple[float, float]:
    """(intercept, slope) of the envelope; slope 0 (offset only) when not fitting drift."""
    if fit_slope:
        return upper_envelope_line(x, z) if upper else lower_envelope_line(x, z)
    return (float(z.max()) if upper else float(z.min())), 0.0
