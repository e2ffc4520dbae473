"""The network share of a response from round trips alone: for peers without a server clock.

How this works
--------------
Against most real systems nothing on the wire says when the server heard the user's end of
speech or started its reply: no server clock, no probes. What the rig can always measure is
the round trip (rig.net.pathsample: WebSocket ping/pong, the kernel's TCP_INFO; RTCP on
WebRTC). For one response (P0 user speech end as sent, P3 the onset's arrival, P4 its
playback start):

    rtt       median of the `NEAREST` round trips completed nearest the response
    backlog   uplink bytes still waiting to leave near P0 / the kernel's delivery rate
    uplink    = backlog + rtt/2      downlink = rtt/2      (ASSUMPTION: a symmetric path)
    model     = (P3 - P0) - rtt - backlog                   queue = P4 - P3

so the four parts add up to the latency. Errors: the symmetric split is an assumption, so
uplink and downlink each carry ±rtt/2 (the true one-way delay lies anywhere in [0, rtt]) plus
half the round trips' spread; model time does not depend on the asymmetry (uplink + downlink
= rtt whatever the split), only on how well the nearby round trips represent this
response's (their spread: max - min, at least the rollout's p95 - min), on the backlog
estimate (its whole size: the sample is up to one interval away from P0) and on the two
event-loop stamps it subtracts (P0, P3), each late by up to the loop's own lateness (p95 of
the send loop's, `stamp_err_ns`), and on WebRTC on the codec's possible lead of the decoded
onset (`codec_onset_err_ms`, rig.analysis.webrtc).

Where a server clock exists (probes, server stamps: rig.analysis.latency) that stronger split
is kept; this one only fills responses it left without a model time, and says so in
`clock_method` ("rtt_half") and `rtt_source`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.analysis.webrtc import receive_path
from rig.clockfit.rtt import RttStats, RttSummary
from rig.core.log import SessionLog
from rig.core.records import RttSample, SendBacklog
from rig.core.units import NS_PER_MS, NS_PER_S

METHOD_RTT_HALF = "rtt_half"
ASSUMPTION = "uplink = downlink = RTT/2 (a symmetric path); ± RTT/2 covers any asymmetry"
#: round-trip sources, most direct first: what a response's split uses when several exist
SOURCE_ORDER = ("probe", "ws_ping", "rtcp", "tcp_info")
NEAREST = 5
#: a backlog sample further than this from P0 says nothing about P0
BACKLOG_WINDOW_NS = 2 * NS_PER_S


@dataclass(frozen=True, slots=True)
class OneWay:
    """A one-way delay estimate near one moment, with the error bar that covers it."""

    delay_ns: float
    err_ns: float
    method: str  # "rtt_half" (or a clock-fit method where a server clock gave it)
    source: str  # which round trips: "ws_ping", "rtcp", "tcp_info", "probe"
    rtt_ns: float
    spread_ns: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "delay_ms": round(self.delay_ns / NS_PER_MS, 3),
            "err_ms": round(self.err_ns / NS_PER_MS, 3),
            "method": self.method,
            "source": self.source,
            "rtt_ms": round(self.rtt_ns / NS_PER_MS, 3),
            "spread_ms": round(self.spread_ns / NS_PER_MS, 3),
            "n": self.n,
        }


def rtt_by_source(log: SessionLog) -> dict[str, RttSummary]:
    """Round-trip statistics per source (only sources with samples)."""
    stats: dict[str, RttStats] = {}
    for s in log.rtt:
        stats.setdefault(s.source, RttStats(s.source)).add(s.rtt_ns, s.t_ns)
    return {k: v.summary() for k, v in sorted(stats.items(), key=lambda kv: _rank(kv[0]))}


def primary_source(log: SessionLog) -> str | None:
    """The most direct round-trip source this rollout has (SOURCE_ORDER), None if none."""
    sources = {s.source for s in log.rtt}
    return min(sources, key=_rank) if sources else None


def _rank(source: str) -> int:
    return SOURCE_ORDER.index(source) if source in SOURCE_ORDER else len(SOURCE_ORDER)


def _nearest(samples: Sequence[RttSample], t_ns: int, k: int) -> np.ndarray[Any, Any]:
    t = np.asarray([s.t_ns for s in samples], dtype=np.int64)
    rtt = np.asarray([s.rtt_ns for s in samples], dtype=np.int64)
    idx = np.argsort(np.abs(t - np.int64(t_ns)), kind="stable")[:k]
    return rtt[idx]


def rtt_near(
    log: SessionLog, t_ns: int, *, source: str | None = None, k: int = NEAREST
) -> tuple[float, float, int, str] | None:
    """(median rtt, spread, n, source) of the k round trips nearest `t_ns`; the spread is
    their range (max - min), at least p95 - min of the source over the whole rollout."""
    source = source or primary_source(log)
    samples = [s for s in log.rtt if s.source == source]
    if not samples or source is None:
        return None
    near = _nearest(samples, t_ns, k)
    every = np.asarray([s.rtt_ns for s in samples], dtype=np.float64)
    # the spread: the nearby round trips' range, at least the rollout's own dispersion
    # (p95 - min: stamping on two event loops and the path's variation, as every frame saw)
    spread = max(float(near.max() - near.min()), float(np.percentile(every, 95) - every.min()))
    return float(np.median(near)), spread, int(near.size), source


def one_way_delay_near(log: SessionLog, t_ns: int, *, source: str | None = None) -> OneWay | None:
    """One-way delay between the rig and the system near `t_ns`, from round trips alone:
    RTT/2 ± (RTT/2 + spread/2). None when the rollout measured no round trip. (For the
    endpointing analysis: where the system decided, relative to what the rig sent.)"""
    near = rtt_near(log, t_ns, source=source)
    if near is None:
        return None
    rtt, spread, n, src = near
    return OneWay(rtt / 2, rtt / 2 + spread / 2, METHOD_RTT_HALF, src, rtt, spread, n)


def backlog_near(log: SessionLog, t_ns: int) -> tuple[int, float | None] | None:
    """(bytes waiting to leave, their time to drain in ns or None) from the backlog sample
    nearest `t_ns` within BACKLOG_WINDOW_NS; None when there is none."""
    samples: Sequence[SendBacklog] = log.backlog
    if not samples:
        return None
    best = min(samples, key=lambda b: abs(b.t_ns - t_ns))
    if abs(best.t_ns - t_ns) > BACKLOG_WINDOW_NS:
        return None
    if best.backlog_bytes == 0:
        return 0, 0.0
    if best.rate_bps is None:
        return best.backlog_bytes, None
    return best.backlog_bytes, best.backlog_bytes * NS_PER_S / best.rate_bps


def rtt_split(response: dict[str, Any], log: SessionLog) -> dict[str, Any] | None:
    """Split fields of one response from round trips (None: no round trip or no onset)."""
    p0 = response.get("user_end_ns")
    arrival = response.get("onset_arrival_ns")
    onset = response.get("onset_ns")
    if p0 is None or arrival is None or onset is None:
        return None
    near = rtt_near(log, (p0 + arrival) // 2)
    if near is None:
        return None
    rtt, spread, n, source = near
    # WebRTC: the arrival stamp is the jitter buffer's release of the decoded frame; the
    # packet reached the socket jitter buffer + codec lookahead earlier. That share is the
    # rig's own (queue), never the system's or the network's
    local = receive_path(response, log)
    local_ns, codec_err = local.delay_ns, local.onset_err_ns
    arrival -= local_ns
    backlog = backlog_near(log, p0)
    backlog_ns = 0.0
    out: dict[str, Any] = {"receive_path_ms": _ms(local_ns)} if local_ns else {}
    if codec_err:
        out["codec_onset_err_ms"] = _ms(codec_err)
    if backlog is not None:
        out["send_backlog_bytes"] = backlog[0]
        if backlog[1] is not None:
            backlog_ns = backlog[1]
            out["send_backlog_ms"] = round(backlog_ns / NS_PER_MS, 3)
    stamp = stamp_err_ns(log)
    half_err = rtt / 2 + spread / 2 + stamp
    out.update(
        {
            "clock_method": METHOD_RTT_HALF,
            "rtt_source": source,
            "rtt_ms": round(rtt / NS_PER_MS, 3),
            "rtt_spread_ms": round(spread / NS_PER_MS, 3),
            "rtt_n": n,
            "split_assumption": ASSUMPTION,
            "uplink_ms": _ms(backlog_ns + rtt / 2),
            "uplink_err_ms": _ms(half_err + backlog_ns),
            "downlink_ms": _ms(rtt / 2),
            "downlink_err_ms": _ms(half_err),
            "model_ms": _ms((arrival - p0) - rtt - backlog_ns),
            "model_err_ms": _ms(spread + backlog_ns + 2 * stamp + codec_err),
            "queue_ms": _ms(onset - arrival),
            "queue_err_ms": 0.0,
        }
    )
    for name in ("uplink", "model", "downlink"):
        out[f"{name}_reason"] = None
    return out


def stamp_err_ns(log: SessionLog) -> float:
    """How late an event-loop stamp may be in this rollout: the p95 of the send loop's own
    lateness (the loop that stamps arrivals wakes just as late). P0 and the onset's arrival
    are both such stamps, so model time carries it twice."""
    if not log.lateness_ns:
        return 0.0
    late = np.asarray(log.lateness_ns, dtype=np.float64)
    return float(max(0.0, np.percentile(late, 95)))


def path_summary(log: SessionLog) -> dict[str, Any]:
    """clock_fit fields about the path: round trips per source, pings lost, send backlog."""
    out: dict[str, Any] = {
        "rtt_by_source": {k: v.as_dict() for k, v in rtt_by_source(log).items()},
        "pings_lost": log.pings_lost,
    }
    if log.backlog:
        worst = max(log.backlog, key=lambda b: b.backlog_bytes)
        out["send_backlog"] = {
            "n": len(log.backlog),
            "max_bytes": worst.backlog_bytes,
            "max_t_ns": worst.t_ns,
        }
    return out


def _ms(ns: float) -> float:
    return round(ns / NS_PER_MS, 3)
