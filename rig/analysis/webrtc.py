"""Rig-local shares of a WebRTC response latency (sans-I/O, works on recorded rows).

How this works: over WebRTC the session stamps downlink audio when aiortc hands over a
decoded frame, so a response latency measured on arrival includes two delays that belong to
the rig's own receive path, not to the network or the system:
  jitter_buffer_ms    aiortc's jitter buffer + decoder thread, measured per frame as
                      hand-off time minus the RTP packet's arrival at the socket (`jb_ms`)
  codec_lookahead_ms  Opus encoder lookahead: decoded audio trails the source by 312
                      samples at 48 kHz (6.5 ms), so an onset is found that much later
What remains (`wire_latency_ms`) runs from the user's last speech sample leaving the rig to
the reply's first sample reaching the rig's socket: uplink + system + downlink. With an RTCP
round-trip time, `network_ms` (RTT) and `system_ms` (the rest) split it further, assuming
the RTT is what the two network legs add.

The onset itself is found in decoded audio, and Opus moves an abrupt onset earlier: CELT's
pre-echo puts quantisation noise above the onset threshold before the first sent sample.
The lead is usually nil, but reaches `OPUS_ONSET_LEAD_MS` when the onset falls late in a
frame (measured over every onset offset in a frame: docs/webrtc.md). The rig cannot tell
which case a given onset is, so every time that ends at a WebRTC onset carries that much
more error (`codec_onset_err_ms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from rig.core.log import SessionLog

OPUS_LOOKAHEAD_MS = 312 * 1000 / 48_000
#: how much earlier than the sender's first sample the first decoded sample above -40 dBFS
#: can be (pre-echo): 6.1 ms measured at worst (a 0 dBFS-peak tone, every offset in the
#: frame, complexity 1-10, tests/transports/test_webrtc_rtp.py), rounded up; complexity 0,
#: which the rig refuses, reached 14 ms. A lower onset threshold hears more pre-echo.
OPUS_ONSET_LEAD_MS = 6.5


def onset_chunk(
    down_chunks: Sequence[dict[str, Any]], onset_arrival_ns: int
) -> dict[str, Any] | None:
    """The downlink chunk row (chunks.jsonl) whose arrival span holds the onset."""
    best = None
    for c in down_chunks:
        if c.get("dir") != "down":
            continue
        t = int(c["t_ns"])
        end = t + int(c["n_samples"]) * 1_000_000_000 // int(c["sample_rate"])
        if t <= onset_arrival_ns < end:
            return c
        if t <= onset_arrival_ns:
            best = c
    return best


def decompose(
    response: dict[str, Any],
    down_chunks: Sequence[dict[str, Any]],
    rtt_ms: float | None = None,
    codec_lookahead_ms: float = OPUS_LOOKAHEAD_MS,
) -> dict[str, Any] | None:
    """Split one `metrics.json` response (arrival placement) into rig-local and wire shares."""
    onset = response.get("onset_arrival_ns")
    end = response.get("user_end_ns")
    if onset is None or end is None:
        return None
    chunk = onset_chunk(down_chunks, int(onset))
    row = chunk or {}
    extra = row.get("extra") or row  # the writer flattens `extra` into the row
    jb = extra.get("jb_ms")
    total = (int(onset) - int(end)) / 1e6
    wire = total - (jb or 0.0) - codec_lookahead_ms
    out: dict[str, Any] = {
        "latency_arrival_ms": round(total, 3),
        "jitter_buffer_ms": jb,
        "codec_lookahead_ms": round(codec_lookahead_ms, 3),
        "codec_onset_err_ms": OPUS_ONSET_LEAD_MS,
        "wire_latency_ms": round(wire, 3),
        "network_ms": None,
        "system_ms": None,
    }
    if rtt_ms is not None:
        out["network_ms"] = round(rtt_ms, 3)
        out["system_ms"] = round(wire - rtt_ms, 3)
    return out


class ReceivePath(NamedTuple):
    """The rig's own share of a WebRTC onset's arrival stamp, and how far off the onset may be."""

    delay_ns: int  # jitter buffer of the onset frame + Opus lookahead: queue, not wire
    onset_err_ns: int  # the codec's possible lead of the decoded onset (pre-echo)


NO_PATH = ReceivePath(0, 0)


def receive_path(response: dict[str, Any], log: SessionLog) -> ReceivePath:
    """The rig's own receive path in a WebRTC response's arrival stamp, to take out of
    network and model time, with the codec's onset error to add to theirs; zeros when the
    session heard no WebRTC frames (no `jb_ms`) or the response has no onset."""
    onset = response.get("onset_arrival_ns")
    if onset is None:
        return NO_PATH
    rows = _heard_rows(log)
    if not rows:
        return NO_PATH
    chunk = onset_chunk(rows, int(onset)) or {}
    return ReceivePath(
        round(((chunk.get("jb_ms") or 0.0) + OPUS_LOOKAHEAD_MS) * 1_000_000),
        round(OPUS_ONSET_LEAD_MS * 1_000_000),
    )


def add_shares(responses: list[dict[str, Any]], log: SessionLog) -> list[dict[str, Any]]:
    """Each response with its `webrtc` shares, where the session heard WebRTC frames (with
    their jitter-buffer delay); the RTT is the median RTCP round trip of the rollout."""
    rows = _heard_rows(log)
    if not rows:
        return responses
    rtts = sorted(log.path_rtt_ms)
    rtt = rtts[len(rtts) // 2] if rtts else None
    out = []
    for r in responses:
        shares = decompose(r, rows, rtt)
        out.append(r if shares is None else {**r, "webrtc": shares})
    return out


def _heard_rows(log: SessionLog) -> list[dict[str, Any]]:
    """The heard WebRTC frames (those with a jitter-buffer delay) as chunk rows."""
    return [
        {
            "dir": "down",
            "t_ns": c.t_ns,
            "n_samples": c.n_samples,
            "sample_rate": c.sample_rate,
            "jb_ms": c.jb_ms,
        }
        for c in log.heard
        if c.jb_ms is not None
    ]
