"""A proxied response's latency as the *client* saw it, split into its legs (pure).

How this works
--------------
The recording proxy (rig.proxy) stamps both directions where they pass it, so its own
response latency runs from the user's end of speech arriving at the proxy (P0) to the
reply's onset as the client would play it (P4, the playback placement of the reply's
arrival at the proxy, P3). The session-log split (rig.analysis.latency / netsplit) already
cuts that into the *upstream* leg (uplink/downlink from the proxy's own round trips to the
system: ping/pong, TCP_INFO) and what remains (`model_ms`). The client saw more and less:

    client_seen = client_up + proxy_up + upstream_up + system + upstream_down
                  + proxy_down + client_down + queue

    client_up, client_down   one-way delays of the client leg: RTT/2 each of the proxy's
                             pings to the client (method `rtt_half`, ± RTT/2 for any
                             asymmetry plus the round trips' spread, rig.analysis.netsplit)
    proxy_up, proxy_down     the proxy's own forwarding delay of the message that carried
                             the user's last speech sample / the reply's onset (measured:
                             socket arrival to hand-over, on the shared clock)
    system                   model_ms of the upstream split minus proxy_up (the upstream
                             pings do not pass the proxy's forwarding path)

Each part says its method; the parts add up to `client_seen_latency_ms` by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rig.analysis.finish import finish_rollout
from rig.analysis.netsplit import OneWay, one_way_delay_near, path_summary
from rig.core.log import SessionLog
from rig.core.records import RttSample
from rig.core.units import NS_PER_MS

METHOD_FORWARD = "proxy_forward"


def client_leg_log(log: SessionLog, client_rtt: Sequence[RttSample]) -> SessionLog:
    """A log holding only the client leg's round trips (what netsplit reads)."""
    return SessionLog(log.t0_ns, log.sample_rate, log.frame_samples, rtt=tuple(client_rtt))


def split_client_legs(
    metrics: dict[str, Any],
    log: SessionLog,
    client_rtt: Sequence[RttSample],
    up_forward_ns: Sequence[tuple[int, int]],
    down_forward_ns: Sequence[int],
) -> dict[str, Any]:
    """metrics.json with each response's client-seen latency and its legs.

    `up_forward_ns`: (first input sample, forwarding delay) per client audio chunk, in
    order; `down_forward_ns`: forwarding delay per downlink audio chunk (its seq)."""
    client = client_leg_log(log, client_rtt)
    out = []
    for r in metrics.get("responses", []):
        out.append({**r, **_legs(r, log, client, up_forward_ns, down_forward_ns)})
    return {**metrics, "responses": out}


def _legs(
    r: dict[str, Any],
    log: SessionLog,
    client: SessionLog,
    up_forward_ns: Sequence[tuple[int, int]],
    down_forward_ns: Sequence[int],
) -> dict[str, Any]:
    if r.get("latency_ms") is None:
        return {"client_seen_latency_ms": None}
    p0, p3 = int(r["user_end_ns"]), int(r.get("onset_arrival_ns") or r["onset_ns"])
    up = one_way_delay_near(client, p0)
    down = one_way_delay_near(client, p3)
    if up is None or down is None:
        return {
            "client_seen_latency_ms": None,
            "client_leg_reason": "no round trips to the client were measured",
        }
    proxy_up = _up_forward(r, log, up_forward_ns)
    seq = r.get("onset_chunk_seq")
    proxy_down = down_forward_ns[seq] if isinstance(seq, int) and seq < len(down_forward_ns) else 0
    client_ms = (up.delay_ns + down.delay_ns) / NS_PER_MS
    proxy_ms = (proxy_up + proxy_down) / NS_PER_MS
    seen = float(r["latency_ms"]) + client_ms + proxy_down / NS_PER_MS
    legs: dict[str, Any] = {
        "client_seen_latency_ms": round(seen, 3),
        "client_seen_err_ms": round(_err(up, down) / NS_PER_MS, 3),
        "client_leg_ms": round(client_ms, 3),
        "client_leg_up_ms": round(up.delay_ns / NS_PER_MS, 3),
        "client_leg_up_err_ms": round(up.err_ns / NS_PER_MS, 3),
        "client_leg_down_ms": round(down.delay_ns / NS_PER_MS, 3),
        "client_leg_err_ms": round(_err(up, down) / NS_PER_MS, 3),
        "client_leg_method": up.method,
        "client_leg_source": up.source,
        "proxy_ms": round(proxy_ms, 3),
        "proxy_method": METHOD_FORWARD,
    }
    if r.get("uplink_ms") is not None and r.get("downlink_ms") is not None:
        legs["upstream_leg_ms"] = round(float(r["uplink_ms"]) + float(r["downlink_ms"]), 3)
    if r.get("model_ms") is not None:
        legs["system_ms"] = round(float(r["model_ms"]) - proxy_up / NS_PER_MS, 3)
    return legs


def _up_forward(
    r: dict[str, Any], log: SessionLog, up_forward_ns: Sequence[tuple[int, int]]
) -> int:
    """Forwarding delay of the client chunk holding the user's last speech sample."""
    turn = next((t for t in log.turns if t.index == r.get("turn")), None)
    if turn is None or turn.speech_end_sample is None or not up_forward_ns:
        return 0
    last = turn.speech_end_sample - 1
    delay = 0
    for start, d in up_forward_ns:
        if start > last:
            break
        delay = d
    return delay


def _err(up: OneWay, down: OneWay) -> float:
    """The client leg's error bar. Up + down is one round trip whatever the asymmetry, so
    only how well the nearby round trips represent these two moments counts: half the
    spread of each (the one-way parts alone carry ± RTT/2 each: `OneWay.err_ns`)."""
    return (up.spread_ns + down.spread_ns) / 2


def legs_summary(log: SessionLog, client_rtt: Sequence[RttSample]) -> dict[str, Any]:
    """metrics.json `legs`: round trips of the client leg and of the upstream leg."""
    return {
        "client": path_summary(client_leg_log(log, client_rtt)),
        "upstream": path_summary(log),
    }


def finish_proxied(
    rollout_dir: str,
    metrics: dict[str, Any],
    log: SessionLog,
    client_rtt: Sequence[RttSample],
    up_forward_ns: Sequence[tuple[int, int]],
    down_forward_ns: Sequence[int],
    *,
    analyze: bool,
) -> dict[str, Any]:
    """What runs after a proxied connection, in the proxy's analysis worker: the rig's own
    finish step (clock fit, latency split over the upstream leg, and with the audio
    recorded the two-track timing analysis), then the client-leg split."""
    metrics = finish_rollout(rollout_dir, metrics, log, analyze=analyze)
    metrics = split_client_legs(metrics, log, client_rtt, up_forward_ns, down_forward_ns)
    return {**metrics, "legs": legs_summary(log, client_rtt)}
