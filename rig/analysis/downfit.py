"""The split for peers with a one-way server clock and round trips (Grok's pings), sans-I/O.

Why: a peer that stamps only its own downlink messages (Grok's `ping` carries its server
time, nothing else does) gives a one-way fit (`envelope-down`): the lower envelope of
(server time, arrival) maps the server clock onto ours *plus* the minimum downlink delay
d_min, which it cannot see. The round trips the rig measures itself (WebSocket ping/pong)
bound it: 0 <= d_min <= min RTT. Together (method `envelope-down+rtt`, the idea of
rig.clockfit.fit.bound_with_rtt applied per response):

```
excess(t)  = arrival - map(server time) of the stamped messages nearest t: the downlink's
             delay above its minimum at t (queueing on the path or in the server's sender)
d_min      = minRTT / 2 +- minRTT / 2                       (any asymmetry of the minima)
downlink   = d_min + excess(P3)                             (the reply's way back, at P3)
uplink     = backlog + RTT(P0) - d_min - excess(P0)          (the way there, at P0)
model      = (P3 - P0) - uplink - downlink
           = (P3 - P0) - backlog - RTT(P0) + excess(P0) - excess(P3)
```

d_min cancels from model time, as with `rtt_half`; what is new is that each leg is read at
its own moment, so a path that was congested when the user stopped and clear when the reply
came back (or the other way round) is not split as if it were the same at both ends, and the
up/down bars are minRTT/2 plus how well the nearby stamps agree instead of RTT/2 plus the
round trips' spread. Errors: `downlink_err` = minRTT/2 + the nearby excesses' range + the
fit's sampling error + one stamp; `uplink_err` = minRTT/2 + the nearby round trips' spread +
the excesses' range at P0 + one stamp + backlog; `model_err` = the round trips' spread + both
excess ranges + the drift error over P3 - P0 + two stamps + backlog (the fitted offset
cancels).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.analysis.netsplit import NEAREST, backlog_near, rtt_near, stamp_err_ns
from rig.analysis.webrtc import receive_path
from rig.clockfit.fit import METHOD_DOWN
from rig.clockfit.mapping import ClockMap
from rig.core.log import SessionLog
from rig.core.units import NS_PER_MS, NS_PER_S

METHOD_DOWN_RTT = "envelope-down+rtt"
ASSUMPTION_DOWN_RTT = (
    "the downlink's minimum delay lies in [0, min RTT] (midpoint taken); its excess over the "
    "minimum near P0 and P3 from the server's stamped messages (one-way fit)"
)
#: stamped messages further than this from a moment say nothing about the path then
EXCESS_WINDOW_NS = 3 * NS_PER_S


def excess_near(
    log: SessionLog, fit: ClockMap, t_ns: int, k: int = NEAREST
) -> tuple[float, float, int] | None:
    """(median, range, peer stamp of the nearest) of arrival - map(server) over the k stamped
    downlink messages that arrived nearest `t_ns` (within EXCESS_WINDOW_NS); None if none."""
    pairs = [(s, a) for s, a in log.down_pairs if abs(a - t_ns) <= EXCESS_WINDOW_NS]
    if not pairs:
        return None
    pairs.sort(key=lambda p: abs(p[1] - t_ns))
    near = pairs[:k]
    ex = np.asarray([a - fit.to_local(s) for s, a in near], dtype=np.float64)
    return float(np.median(ex)), float(ex.max() - ex.min()), near[0][0]


def down_fit_split(
    response: dict[str, Any], log: SessionLog, fit: ClockMap
) -> dict[str, Any] | None:
    """Split fields for one response from a one-way downlink fit plus round trips; None when
    the fit is not a drift-fitted `envelope-down` map of messages stamped at send (audio
    stamps are not), or a part is missing near P0 or P3."""
    if fit.method != METHOD_DOWN or not fit.drift_fitted:
        return None
    if any(c.server_ts_ms is not None for c in log.heard):
        # audio stamps (RTP over WebRTC) are capture times, not send times: the envelope
        # then holds packetisation too, and min RTT no longer bounds it
        return None
    p0 = response.get("user_end_ns")
    arrival = response.get("onset_arrival_ns")
    onset = response.get("onset_ns")
    if p0 is None or arrival is None or onset is None:
        return None
    local = receive_path(response, log)
    p3 = arrival - local.delay_ns
    near0 = rtt_near(log, p0)
    ex0 = excess_near(log, fit, p0)
    ex3 = excess_near(log, fit, p3)
    if near0 is None or ex0 is None or ex3 is None:
        return None
    rtt0, spread0, n, source = near0
    every = [s.rtt_ns for s in log.rtt if s.source == source]
    half_min = min(every) / 2
    backlog = backlog_near(log, p0)
    backlog_ns = (backlog[1] or 0.0) if backlog is not None else 0.0
    stamp = stamp_err_ns(log)
    drift_err = (fit.drift_err_ppm or 0.0) * 1e-6 * abs(p3 - p0)
    fit_err = fit.offset_err_ns  # the envelope's own sampling error (d_min aside)
    up = backlog_ns + rtt0 - half_min - ex0[0]
    down = half_min + ex3[0]
    out: dict[str, Any] = {
        "clock_method": METHOD_DOWN_RTT,
        "rtt_source": source,
        "rtt_ms": _ms(rtt0),
        "rtt_spread_ms": _ms(spread0),
        "rtt_n": n,
        "rtt_min_ms": _ms(2 * half_min),
        "down_excess_p0_ms": _ms(ex0[0]),
        "down_excess_p3_ms": _ms(ex3[0]),
        "split_assumption": ASSUMPTION_DOWN_RTT,
        "uplink_ms": _ms(up),
        "uplink_err_ms": _ms(half_min + spread0 + ex0[1] + stamp + backlog_ns),
        "downlink_ms": _ms(down),
        "downlink_err_ms": _ms(half_min + ex3[1] + fit_err + stamp),
        "model_ms": _ms((p3 - p0) - up - down),
        "model_err_ms": _ms(
            spread0 + ex0[1] + ex3[1] + drift_err + 2 * stamp + backlog_ns + local.onset_err_ns
        ),
        "queue_ms": _ms(onset - p3),
        "queue_err_ms": 0.0,
    }
    if backlog is not None:
        out["send_backlog_bytes"] = backlog[0]
        if backlog[1] is not None:
            out["send_backlog_ms"] = _ms(backlog[1])
    if local.delay_ns:
        out["receive_path_ms"] = _ms(local.delay_ns)
    if local.onset_err_ns:
        out["codec_onset_err_ms"] = _ms(local.onset_err_ns)
    for name in ("uplink", "model", "downlink"):
        out[f"{name}_reason"] = None
    return out


def _ms(ns: float) -> float:
    return round(ns / NS_PER_MS, 3)
