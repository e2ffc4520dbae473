"""Endpointing vs generation per response, for systems that report their end-of-turn decision.

Why: teams tune turn detection (server VAD silence, eagerness, Pipecat's stop_secs) more
than anything else, and the number they need is how much of a response's delay is the
system *waiting to be sure the user finished* (`detect_ms`: the user's speech end as it
reached the system -> the system's decision) versus *producing the reply* (`generation_ms`:
decision -> first reply audio leaving the system). detect + generation = `model_ms`.

How this works
--------------
With a server clock (probes, a two-way fit) the decision's server stamp is mapped and the
split is made in rig.analysis.latency. This pass fills every other response whose system
reported its decision (the first decision event that arrived between the user's speech end
P0 and the onset's arrival P3), from arrival times on the rig's one clock:

    generation = P3 - arrival(decision)   both messages came down the same path: their
                                          downlink delays cancel up to the path's jitter
    detect     = model - generation       where a model time exists (a fit, or the
                                          round-trip split of rig.analysis.netsplit)
               = arrival(decision) - P0 - RTT   else, with the rollout's round trips
                                          (`clock_fit.rtt`: probes, echoes, WebSocket pings)

The path asymmetry cancels in both (only uplink + downlink = RTT enters), so the error bar
is the round trips' spread (p95 - min), which covers one message's delay differing from
the typical one, plus how late the rig's own loop may have stamped each arrival it uses:
a loop that was busy when a message came in stamps it late, and the frames it sent then
were late by as much (the largest send lateness within `LOOP_WINDOW_NS` of the stamp).
With no round trip measured at all, detect is `arrival - P0`: an upper bound (it still
holds the round trip), said in `detect_method` ("arrival") with no error bar.

Pure: metrics dict and `SessionLog` in, fields out.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any

from rig.analysis.webrtc import receive_path
from rig.core.log import SessionLog
from rig.core.records import ServerMark
from rig.core.units import NS_PER_MS

#: a stamp's possible lateness: the rig's send lateness of frames sent this close to it
LOOP_WINDOW_NS = 60 * NS_PER_MS

#: events by which a system says "the user's turn ended" (rig sim, OpenAI/Grok, Pipecat RTVI)
DECISION_KINDS = (
    "speech_stopped",
    "input_audio_buffer.speech_stopped",
    "rtvi.user-stopped-speaking",
    "rtvi.vad-user-stopped-speaking",  # Pipecat's RTVIObserver with vad_user_speaking_enabled
    "user_stopped_speaking",
)
METHOD_ARRIVALS = "arrivals"  # difference of two arrivals on the rig's clock
METHOD_RTT_HALF = "rtt_half"  # decision time = arrival - RTT/2, the user's end + RTT/2
METHOD_ARRIVAL = "arrival"  # no round trip known: an upper bound holding the round trip
FIELDS = (
    "detect_ms",
    "detect_err_ms",
    "detect_method",
    "generation_ms",
    "generation_err_ms",
    "generation_method",
)
NO_DECISION = (
    "the system reported no end-of-turn decision (speech_stopped, user-stopped-speaking) "
    "between the user's speech end and the reply"
)


def apply_endpointing(metrics: dict[str, Any], obs: SessionLog | None) -> dict[str, Any]:
    """metrics.json with detect/generation on every response that lacks them (pure)."""
    if obs is None:
        return metrics
    fit = metrics.get("clock_fit")
    rtt = fit.get("rtt") if isinstance(fit, dict) else None
    responses = [
        r if r.get("detect_ms") is not None else {**r, **endpoint_fields(r, obs, rtt)}
        for r in metrics.get("responses", [])
    ]
    return {**metrics, "responses": responses}


def endpoint_fields(
    response: dict[str, Any], obs: SessionLog, rtt: dict[str, Any] | None
) -> dict[str, Any]:
    """detect/generation for one response from arrival times (see the module docstring)."""
    p0 = response.get("user_end_ns")
    p3 = response.get("onset_arrival_ns")
    if p0 is None or p3 is None:
        return _null(response.get("reason") or "no system onset matched this turn")
    stop = _decision(obs.marks, p0, p3)
    if stop is None:
        return _null(NO_DECISION)
    # WebRTC: the onset packet reached the socket before the jitter buffer released its
    # decoded frame; the decision came on the data channel, which no jitter buffer holds
    local = receive_path(response, obs)
    p3 -= local.delay_ns
    rtt_ns, path_ns = _rtt(rtt)
    late_stop, late_onset = loop_lateness_ns(obs, stop.t_ns), loop_lateness_ns(obs, p3)
    gen_ns = p3 - stop.t_ns
    spread_ns = None if path_ns is None else path_ns + late_stop + late_onset
    detect_spread_ns = None if path_ns is None else path_ns + late_stop
    out: dict[str, Any] = {
        "decision_source": stop.kind,
        "generation_ms": _ms(gen_ns),
        # WebRTC: the decoded onset may lead the sent one (pre-echo); detect is model -
        # generation, where that lead cancels, and model_err already carries it once
        "generation_err_ms": None if spread_ns is None else _ms(spread_ns + local.onset_err_ns),
        "generation_method": METHOD_ARRIVALS,
    }
    if spread_ns is None:
        out["generation_reason"] = "no round trip measured: the path's jitter is unknown"
    model = response.get("model_ms")
    model_err = response.get("model_err_ms")
    if isinstance(model, int | float):
        err = None
        if isinstance(model_err, int | float) and spread_ns is not None:
            err = round(model_err + spread_ns / NS_PER_MS, 3)
        out.update(
            detect_ms=round(model - gen_ns / NS_PER_MS, 3),
            detect_err_ms=err,
            detect_method=response.get("clock_method") or METHOD_RTT_HALF,
        )
        used_rtt = response.get("rtt_ms")  # the round trip (+ send backlog) the split used
        if response.get("clock_method") == METHOD_RTT_HALF and isinstance(used_rtt, int | float):
            backlog = response.get("send_backlog_ms")
            extra = backlog if isinstance(backlog, int | float) else 0.0
            out["detect_rtt_ms"] = round(used_rtt + extra, 3)
    elif rtt_ns is not None and detect_spread_ns is not None:
        out.update(
            detect_ms=_ms(stop.t_ns - p0 - rtt_ns),
            detect_err_ms=_ms(detect_spread_ns),
            detect_method=METHOD_RTT_HALF,
            detect_rtt_ms=_ms(rtt_ns),
        )
    else:
        out.update(
            detect_ms=_ms(stop.t_ns - p0),
            detect_err_ms=None,
            detect_method=METHOD_ARRIVAL,
            detect_reason="no round trip measured: an upper bound that includes the round trip",
        )
    return out


def _decision(marks: Sequence[ServerMark], p0: int, p3: int) -> ServerMark | None:
    """The first decision event that arrived between the user's end and the reply's onset."""
    return next((m for m in marks if p0 <= m.t_ns <= p3 and m.kind in DECISION_KINDS), None)


def loop_lateness_ns(obs: SessionLog, t_ns: int) -> int:
    """How late the rig's loop may have stamped something at `t_ns`: the largest send
    lateness of the frames it sent within `LOOP_WINDOW_NS` (same loop, same stall)."""
    lo = bisect_left(obs.send_ns, t_ns - LOOP_WINDOW_NS)
    hi = bisect_right(obs.send_ns, t_ns + LOOP_WINDOW_NS)
    return max([0, *obs.lateness_ns[lo:hi]])


def _rtt(rtt: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(typical round trip, its spread p95 - min) in ns from an `RttSummary.as_dict()`."""
    if not isinstance(rtt, dict) or not rtt.get("count"):
        return None, None
    p50, p95, lo = rtt.get("rtt_p50_ms"), rtt.get("rtt_p95_ms"), rtt.get("rtt_min_ms")
    if not all(isinstance(v, int | float) for v in (p50, p95, lo)):
        return None, None
    assert isinstance(p50, int | float) and isinstance(p95, int | float)
    assert isinstance(lo, int | float)
    return p50 * NS_PER_MS, (p95 - lo) * NS_PER_MS


def _ms(ns: float) -> float:
    return round(ns / NS_PER_MS, 3)


def _null(reason: str) -> dict[str, Any]:
    return {
        "detect_ms": None,
        "detect_err_ms": None,
        "detect_reason": reason,
        "generation_ms": None,
        "generation_err_ms": None,
        "generation_reason": reason,
    }
