"""Split each response's latency into uplink, model, downlink and local queueing.

How this works
--------------
A response's latency (user speech end as sent -> system onset on the playback timeline) is
cut at three more points, all on the shared clock:

    P0 user speech end, as sent          (the rig's send log)
    P1 its estimated arrival at server   P0 + uplink delay measured by probes near P0
    P2 server-side response start        the onset chunk's `server_ts_ms` (else the
                                         `response.start` event's), mapped by the clock fit
    P3 arrival back at the rig           the onset chunk's arrival stamp
    P4 playback start                    the onset on the listener's playback queue

    uplink_ms = P1 - P0   model_ms = P2 - P1   downlink_ms = P3 - P2   queue_ms = P4 - P3

so the four parts always add up to `latency_ms`.

The clock fit: with four-timestamp probes (t0 sent, t1 server receive, t2 server send,
t3 received) it is `fit_two_way(t2, t3, t0, t1)`: the server clock lies between the two
one-way envelopes, and half their gap (half the minimum round trip) bounds the offset
whatever the path asymmetry. Without probes only the server stamps on downlink messages
remain, a one-way fit that cannot tell offset from delay: the network parts are then null
with the fit's reason (refusing beats a made-up split).

The uplink delay of the one audio frame that held the end of speech is not observable
unless the server stamps that audio's arrival; each probe's uplink delay (map(t1) - t0) is,
so P1 uses the median of the probes nearest in time, and their range joins the error (it
covers the frame whenever its delay lay within what those probes saw).
`model_ms` = map(P2) - P0 - median(map(t1) - t0) does not depend on the fitted offset
at all (it cancels), only on drift and on how well the probes represent that frame.

Where the server reports its end of speech on the input-audio timeline (`audio_end_ms`,
OpenAI style), that sample is mapped through the rig's send log to a send time, giving
`speech_end_offset_ms` (server's end of speech minus the rig's, as sent), and, with the
detection event's server stamp, `detect_ms` (endpointing wait, the first part of model_ms).

Errors: uplink = fitted offset error + probe spread; model = probe spread + drift error
times the distance; downlink = fitted offset error at P2; queue = 0 (one clock).
Everything here is pure: the session hands in what it saw (its `SessionLog`, rig.core.log).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rig.analysis.downfit import down_fit_split
from rig.analysis.netsplit import path_summary, rtt_by_source, rtt_split
from rig.clockfit.fit import METHOD_TWO_WAY, fit_downlink, fit_two_way
from rig.clockfit.mapping import ClockMap, FitRefusal, join_reasons, refusal_reason
from rig.clockfit.rtt import RttStats, RttSummary
from rig.clockfit.steps import ClockStep, segment_at, split_fit, stretch_bounds_dict
from rig.core.log import SessionLog
from rig.core.records import Probe, ServerMark
from rig.core.units import NS_PER_MS, NS_PER_S, ms_to_ns

COMPONENTS = ("uplink_ms", "model_ms", "downlink_ms", "queue_ms")
#: events that say where the server put the end of the user's speech on its input timeline
SPEECH_STOPPED_KINDS = ("speech_stopped", "input_audio_buffer.speech_stopped")
RESPONSE_START_KINDS = ("response.start",)
#: probes nearest a response whose uplink delays estimate that response's uplink delay
NEAREST_PROBES = 9
FIT_MIN_SAMPLES = 6
FIT_MIN_SPAN_NS = NS_PER_S
#: two-way envelopes crossing by less than this are stamp rounding, not a broken clock
CROSS_TOLERANCE_NS = 1_000
#: server stamps travel as float ms: two of them differ from the truth by this much at most
STAMP_ROUNDING_NS = 2_000


@dataclass(frozen=True, slots=True)
class SessionClock:
    """The rollout's server-clock fit and what the probes say about the path."""

    fit: ClockMap | FitRefusal
    source: str  # "probes" | "server_ts" | "none"
    rtt: RttSummary
    up_t0_ns: tuple[int, ...]  # per probe (split fits only): send time ...
    up_delay_ns: tuple[int, ...]  # ... and uplink delay, map(t1) - t0
    down_delay_ns: tuple[int, ...]  # downlink audio/event delays, arrival - map(server)
    #: where the peer clock stepped (rig/clockfit/steps.py), and then one clock per stretch
    #: between steps as (local from, local to, clock); this record is the longest stretch's
    steps: tuple[ClockStep, ...] = ()
    segments: tuple[tuple[int, int, SessionClock], ...] = ()

    def at(self, arrival_ns: int, peer_ns: int | None) -> SessionClock:
        """The clock of the stretch (between steps) a message stamped `peer_ns` that arrived
        at `arrival_ns` belongs to; itself when the clock never stepped."""
        if not self.segments:
            return self
        return segment_at(self.steps, self.segments, arrival_ns, peer_ns, lambda seg: seg.fit)

    def as_dict(self) -> dict[str, Any]:
        d = self.fit.as_dict()
        d["source"] = self.source
        d["rtt"] = self.rtt.as_dict()
        d["uplink_delay_ms"] = (
            _spread_ms(self.up_delay_ns) if split_reason(self.fit) is None else None
        )
        d["downlink_delay_ms"] = _spread_ms(self.down_delay_ns)
        if self.steps:
            d["steps"] = [st.as_dict() for st in self.steps]
            d["segments"] = [
                {**stretch_bounds_dict(lo, hi), **seg.as_dict()} for lo, hi, seg in self.segments
            ]
        return d


def _spread_ms(values_ns: Sequence[int]) -> dict[str, Any] | None:
    if not values_ns:
        return None
    a = np.asarray(values_ns, dtype=np.float64) / NS_PER_MS
    p5, p50, p95 = np.percentile(a, [5, 50, 95])
    return {
        "n": int(a.size),
        "min": round(float(a.min()), 3),
        "p5": round(float(p5), 3),
        "p50": round(float(p50), 3),
        "p95": round(float(p95), 3),
        "max": round(float(a.max()), 3),
    }


# --- the split of a rollout ------------------------------------------------------------


def apply_decomposition(metrics: dict[str, Any], obs: SessionLog | None) -> dict[str, Any]:
    """metrics.json with each response split and the rollout's clock fit (pure, picklable in)."""
    if obs is None:
        return metrics
    try:
        clock = fit_clock(obs)
        responses = [_split(r, obs, clock) for r in metrics.get("responses", [])]
        fit = clock.as_dict()
        fit.update(path_summary(obs))
        if clock.rtt.count == 0:  # no probes: the round trips measured without the server
            best = next(iter(rtt_by_source(obs).values()), None)
            if best is not None:
                fit["rtt"] = best.as_dict()
        return {**metrics, "responses": responses, "clock_fit": fit}
    except Exception as exc:  # noqa: BLE001 - a failed split must not lose the rollout
        return {**metrics, "clock_fit": {"error": f"{type(exc).__name__}: {exc}"}}


def _split(response: dict[str, Any], obs: SessionLog, clock: SessionClock) -> dict[str, Any]:
    """The strongest split there is: the server clock's (probes, server stamps); where that
    leaves no model time, the round trips' (rig.analysis.netsplit, method `rtt_half`)."""
    out = {**response, **decompose(response, obs, clock)}
    if out.get("model_ms") is None:
        fit = clock.fit
        # a one-way server clock (Grok's pings) + round trips: each leg at its own moment
        by_rtt = down_fit_split(response, obs, fit) if isinstance(fit, ClockMap) else None
        by_rtt = by_rtt or rtt_split(response, obs)
        if by_rtt is not None:
            # keep why the stronger method could not split it, then the weaker split
            out["server_clock_reason"] = out.get("model_reason")
            out.update(by_rtt)
    return out


# --- the fit -------------------------------------------------------------------------------


def fit_clock(
    obs: SessionLog,
    *,
    min_samples: int = FIT_MIN_SAMPLES,
    min_span_ns: int = FIT_MIN_SPAN_NS,
) -> SessionClock:
    """Two-way fit from the probes where there are any; else one-way from server stamps.
    Where the probes prove the server clock stepped, one fit per stretch between steps."""
    probes = sorted(obs.probes, key=lambda p: p.t0_ns)  # send order, as the steps count

    def fit(k: slice, lo: int, hi: int) -> SessionClock:
        pairs = [(sv, t) for sv, t in obs.down_pairs if lo <= t < hi]
        return _fit_stretch(probes[k], pairs, min_samples, min_span_ns)

    steps, segments = split_fit(
        [p.t0_ns for p in probes],
        [p.t1_peer_ns for p in probes],
        [p.t2_peer_ns for p in probes],
        [p.t3_ns for p in probes],
        fit,
    )
    if not steps:
        clock = segments[0][2]
        if not probes and obs.probe_echoes:  # round trips without a server clock
            echo = RttStats("probe_echo")
            for t_ns, rtt_ns in obs.probe_echoes:
                echo.add(rtt_ns, t_ns)
            clock = replace(clock, rtt=echo.summary())
        return clock
    longest = max(segments, key=lambda seg: len(seg[2].up_t0_ns))[2]
    return replace(longest, steps=tuple(steps), segments=tuple(segments))


def _fit_stretch(
    probes: Sequence[Probe],
    down_pairs: Sequence[tuple[int, int]],
    min_samples: int,
    min_span_ns: int,
) -> SessionClock:
    """One straight-line fit over these probes (else these server stamps)."""
    fit: ClockMap | FitRefusal
    rtt = RttStats("probe")
    if probes:
        t0 = [p.t0_ns for p in probes]
        t1 = [p.t1_peer_ns for p in probes]
        t2 = [p.t2_peer_ns for p in probes]
        t3 = [p.t3_ns for p in probes]
        fit = fit_two_way(t2, t3, t0, t1, min_samples=min_samples, min_span_ns=min_span_ns)
        source = "probes"
        rate = fit.rate if isinstance(fit, ClockMap) else 1.0
        for p in probes:
            rtt_ns = (p.t3_ns - p.t0_ns) - round((p.t2_peer_ns - p.t1_peer_ns) * rate)
            if rtt_ns >= -CROSS_TOLERANCE_NS:  # a hair below 0 is rounding of the hold
                rtt.add(max(0, rtt_ns), p.t3_ns)
    elif down_pairs:
        peer = [s for s, _ in down_pairs]
        local = [t for _, t in down_pairs]
        fit = fit_downlink(peer, local, min_samples=min_samples, min_span_ns=min_span_ns)
        source = "server_ts"
    else:
        fit = FitRefusal("none", 0, "the system reported no server timestamps and no probes")
        source = "none"
    up_t0: list[int] = []
    up_d: list[int] = []
    down_d: list[int] = []
    if isinstance(fit, ClockMap):
        # kept even without a split: model time needs them, and their offset cancels there
        for p in probes:
            up_t0.append(p.t0_ns)
            up_d.append(fit.to_local(p.t1_peer_ns) - p.t0_ns)
        if split_reason(fit) is None:
            for s_ns, t_ns in down_pairs:
                down_d.append(t_ns - fit.to_local(s_ns))
    return SessionClock(fit, source, rtt.summary(), tuple(up_t0), tuple(up_d), tuple(down_d))


# --- one response ---------------------------------------------------------------------------


def decompose(response: dict[str, Any], obs: SessionLog, clock: SessionClock) -> dict[str, Any]:
    """The split fields for one entry of `match_responses` (merged into it by the caller)."""
    out: dict[str, Any] = {}
    p0 = response.get("user_end_ns")
    onset = response.get("onset_ns")
    arrival = response.get("onset_arrival_ns")
    fit = clock.fit
    out["clock_method"] = fit.method
    if p0 is None or onset is None or arrival is None:
        why = response.get("reason") or "no system onset matched this turn"
        return {**out, **_nulls(COMPONENTS, why)}
    out["queue_ms"] = _ms(onset - arrival)
    out["queue_err_ms"] = 0.0

    window = _window(p0, arrival, obs)
    stop = _first(window, SPEECH_STOPPED_KINDS)
    if stop is not None and stop.audio_end_ms is not None:
        end_sample = round(stop.audio_end_ms * obs.sample_rate / 1000)
        out["speech_end_offset_ms"] = _ms(obs.sent_ns_of_sample(end_sample) - p0)

    server_start, start_source = _server_start(response, window)
    out["server_start_source"] = start_source
    clock = clock.at(arrival, server_start)  # the stretch between clock steps it lies in
    fit = clock.fit
    names = ("uplink_ms", "model_ms", "downlink_ms")
    if server_start is None:
        return {**out, **_nulls(names, "no server timestamp on the onset chunk or response start")}
    split_why = split_reason(fit)
    model_why = refusal_reason(fit, need_split=False, need_drift=True)
    no_probes = join_reasons(
        "no four-timestamp probes: the server's receive time of the user's audio is unknown",
        fit.reason,
    )
    up_why = split_why or (None if clock.up_delay_ns else no_probes)
    model_why = model_why or (None if clock.up_delay_ns else no_probes)
    if isinstance(fit, FitRefusal):
        return {**out, **_nulls(names, fit.reason)}
    p2 = fit.to_local(server_start)
    if split_why is None:
        out["downlink_ms"] = _ms(arrival - p2)
        out["downlink_err_ms"] = _err_ms(fit.local_err_ns(server_start))
    else:
        out.update(_nulls(["downlink_ms"], split_why))
    if model_why is not None:
        out.update(_nulls(["model_ms"], model_why))
    if up_why is not None:
        out.update(_nulls(["uplink_ms"], up_why))
    if model_why is not None:
        return out
    up_ns, range_ns, ref_t1_local = _uplink_near(p0, clock)
    drift_err = (fit.drift_err_ppm or 0.0) * 1e-6
    p1 = p0 + up_ns
    if up_why is None:
        out["uplink_ms"] = _ms(up_ns)
        offset_err = fit.local_err_ns(fit.to_peer(ref_t1_local))
        out["uplink_err_ms"] = _err_ms(offset_err + range_ns)
    # map(P2) - P0 - median(map(t1) - t0): the fitted offset cancels, only drift remains
    out["model_ms"] = _ms(p2 - p1)
    out["model_err_ms"] = _err_ms(range_ns + drift_err * abs(p2 - ref_t1_local))
    if stop is not None and stop.server_ns is not None:
        # the decision on the server clock, mapped: detect + generation = model exactly
        t_dec = fit.to_local(stop.server_ns)
        out.update(
            decision_source=stop.kind,
            detect_ms=_ms(t_dec - p1),
            detect_err_ms=_err_ms(range_ns + drift_err * abs(t_dec - ref_t1_local)),
            detect_method=fit.method,
            generation_ms=_ms(p2 - t_dec),
            # both ends on the server clock: only the drift error over the gap remains
            generation_err_ms=_err_ms(drift_err * abs(p2 - t_dec) + STAMP_ROUNDING_NS),
            generation_method=fit.method,
        )
    return out


def split_reason(fit: ClockMap | FitRefusal) -> str | None:
    """Why `fit` cannot split network delay from offset (None: it can).

    Two-way envelopes that cross by less than `CROSS_TOLERANCE_NS` are rounding in the
    stamps (ms floats, a server's ns clock read at an odd moment), not inconsistent clocks.
    """
    why = refusal_reason(fit, need_split=True, need_drift=True)
    if (
        why is not None
        and isinstance(fit, ClockMap)
        and fit.method == METHOD_TWO_WAY
        and fit.drift_fitted
        and not fit.split
        and fit.offset_err_ns <= CROSS_TOLERANCE_NS
    ):
        return None
    return why


def _window(p0: int, arrival: int, obs: SessionLog) -> list[ServerMark]:
    """Server events that arrived between the user's end and the onset's arrival."""
    return [m for m in obs.marks if p0 <= m.t_ns <= arrival]


def _first(marks: Sequence[ServerMark], kinds: Sequence[str]) -> ServerMark | None:
    return next((m for m in marks if m.kind in kinds), None)


def _server_start(
    response: dict[str, Any], window: Sequence[ServerMark]
) -> tuple[int | None, str | None]:
    """Server time of the heard onset; else of the response start (includes any lead-in)."""
    ts = response.get("onset_server_ts_ms")
    if isinstance(ts, int | float):
        return ms_to_ns(ts), "onset_chunk"
    start = _first([m for m in window if m.server_ns is not None], RESPONSE_START_KINDS)
    if start is not None:
        return start.server_ns, start.kind
    return None, None


def _uplink_near(p0: int, clock: SessionClock) -> tuple[int, float, int]:
    """Median uplink delay of the probes sent nearest P0, its spread, and their mid send.

    Returns (delay_ns, spread_ns, local time of the probes' arrival at the server).
    """
    t0 = np.asarray(clock.up_t0_ns, dtype=np.int64)
    d = np.asarray(clock.up_delay_ns, dtype=np.int64)
    idx = np.argsort(np.abs(t0 - np.int64(p0)), kind="stable")[:NEAREST_PROBES]
    near = d[idx]
    med = int(np.median(near))
    spread = float(near.max() - near.min())  # wide enough for any delay within their range
    mid_t1_local = int(np.median(t0[idx] + near))
    return med, spread, mid_t1_local


def _ms(ns: float) -> float:
    return round(ns / NS_PER_MS, 3)


def _err_ms(ns: float) -> float | None:
    return round(ns / NS_PER_MS, 3) if math.isfinite(ns) else None


def _nulls(names: Sequence[str], reason: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        base = name.removesuffix("_ms")
        out[name] = None
        out[f"{base}_err_ms"] = None
        out[f"{base}_reason"] = reason
    return out
