"""RTCP bookkeeping on the shared clock (sans-I/O): round-trip time, jitter, loss, NTP<->RTP.

How this works: the peer shell taps every RTCP packet where it crosses our socket, stamps it
with the shared clock, and feeds it here. Nothing in this module reads a clock.

- Our sender reports (SR) are remembered by their LSR key (middle 32 bits of the NTP time)
  with the time they left. When the far end's receiver report (RR) about our stream comes
  back quoting that LSR with a DLSR (how long it held the SR), the round-trip time is
  `t_rr_arrival - t_sr_sent - dlsr` (RFC 3550 6.4.1), all three on clocks we trust for
  intervals; the far end's wall clock never enters, unlike aiortc's own smoothed estimate.
- The far end's SR pairs its NTP clock with an RTP timestamp of its stream. With our arrival
  stamp it is a one-way clock sample (server NTP ms, local t_ns) for the clock fit, and it
  maps any RTP timestamp of that stream onto the sender's clock (`rtp_to_server_ms`).
- RR jitter arrives in RTP units (the far end's interarrival jitter of our stream) and is
  reported in ms; loss as fraction (0..1) and cumulative count.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiortc.rtp import AnyRtcpPacket, RtcpRrPacket, RtcpSrPacket

from rig.core.units import NS_PER_S

NTP_UNIX_OFFSET_S = 2_208_988_800
"""Seconds from the NTP epoch (1900) to the Unix epoch (1970)."""

_MAX_PENDING_SR = 64


def ntp_to_unix_ms(ntp: int) -> float:
    """A 64-bit NTP timestamp as Unix milliseconds."""
    seconds = (ntp >> 32) - NTP_UNIX_OFFSET_S
    return seconds * 1000.0 + (ntp & 0xFFFF_FFFF) * 1000.0 / (1 << 32)


def unix_ns_to_ntp(unix_ns: int) -> int:
    """Unix time in ns as a 64-bit NTP timestamp (seconds since 1900, 32.32 fixed point)."""
    seconds, frac_ns = divmod(unix_ns, NS_PER_S)
    return ((seconds + NTP_UNIX_OFFSET_S) << 32) | (frac_ns << 32) // NS_PER_S


def rtp_diff(a: int, b: int) -> int:
    """a - b for 32-bit RTP timestamps, across a wrap."""
    d = (a - b) & 0xFFFF_FFFF
    return d - (1 << 32) if d >= 1 << 31 else d


@dataclass(frozen=True, slots=True)
class SenderMapping:
    """The latest (server NTP, RTP timestamp) pair of one incoming stream, and its arrival."""

    ssrc: int
    server_ms: float
    rtp_ts: int
    t_ns: int
    lsr: int = 0  # middle 32 bits of its NTP time: what our report block quotes back


@dataclass(frozen=True, slots=True)
class RttSample:
    t_ns: int
    rtt_ns: int


class RtcpLedger:
    """Everything RTCP told us about one peer connection, with shared-clock stamps."""

    def __init__(self, clock_rate: int = 48_000) -> None:
        self.clock_rate = clock_rate
        self.local_ssrcs: set[int] = set()
        self._sr_sent: OrderedDict[int, int] = OrderedDict()  # lsr -> t_ns
        self.mappings: dict[int, SenderMapping] = {}
        self.rtt: list[RttSample] = []
        self.sr_sent = 0
        self.sr_received = 0
        self.rr_received = 0

    def on_sent(self, packets: list[AnyRtcpPacket], t_ns: int) -> None:
        """RTCP we sent, stamped when it was handed to the socket."""
        for p in packets:
            if isinstance(p, RtcpSrPacket):
                self.local_ssrcs.add(p.ssrc)
                lsr = (p.sender_info.ntp_timestamp >> 16) & 0xFFFF_FFFF
                self._sr_sent[lsr] = t_ns
                self.sr_sent += 1
                while len(self._sr_sent) > _MAX_PENDING_SR:
                    self._sr_sent.popitem(last=False)

    def on_received(
        self, packets: list[AnyRtcpPacket], t_ns: int
    ) -> list[tuple[str, dict[str, Any], float | None]]:
        """RTCP that arrived at `t_ns`: returns (event kind, data, server_ts_ms) to record."""
        out: list[tuple[str, dict[str, Any], float | None]] = []
        for p in packets:
            if isinstance(p, RtcpSrPacket):
                self.sr_received += 1
                info = p.sender_info
                server_ms = ntp_to_unix_ms(info.ntp_timestamp)
                lsr = (info.ntp_timestamp >> 16) & 0xFFFF_FFFF
                self.mappings[p.ssrc] = SenderMapping(
                    p.ssrc, server_ms, info.rtp_timestamp, t_ns, lsr
                )
                out.append(
                    (
                        "rtcp.sr",
                        {
                            "ssrc": p.ssrc,
                            "ntp_ms": round(server_ms, 3),
                            "rtp_ts": info.rtp_timestamp,
                            "packets": info.packet_count,
                            "octets": info.octet_count,
                        },
                        round(server_ms, 3),
                    )
                )
            if isinstance(p, RtcpSrPacket | RtcpRrPacket):
                for r in p.reports:
                    if self.local_ssrcs and r.ssrc not in self.local_ssrcs:
                        continue
                    self.rr_received += 1
                    data: dict[str, Any] = {
                        "ssrc": r.ssrc,
                        "from_ssrc": p.ssrc,
                        "jitter_ms": round(r.jitter * 1000 / self.clock_rate, 3),
                        "fraction_lost": round(r.fraction_lost / 256, 4),
                        "packets_lost": r.packets_lost,
                        "highest_seq": r.highest_sequence,
                        "rtt_ms": None,
                    }
                    sent = self._sr_sent.get(r.lsr) if r.lsr else None
                    if sent is not None and r.dlsr:
                        rtt_ns = t_ns - sent - (r.dlsr * 1_000_000_000 >> 16)
                        self.rtt.append(RttSample(t_ns, rtt_ns))
                        data["rtt_ms"] = round(rtt_ns / 1e6, 3)
                        data["dlsr_ms"] = round(r.dlsr * 1000 / 65536, 3)
                    out.append(("rtcp.rr", data, None))
        return out

    def rtp_to_server_ms(self, ssrc: int, rtp_ts: int) -> float | None:
        """The sender's clock (Unix ms) at which RTP timestamp `rtp_ts` was sampled."""
        m = self.mappings.get(ssrc)
        if m is None:
            return None
        return m.server_ms + rtp_diff(rtp_ts, m.rtp_ts) * 1000.0 / self.clock_rate

    def summary(self) -> dict[str, Any]:
        rtts = sorted(s.rtt_ns for s in self.rtt)
        return {
            "sr_sent": self.sr_sent,
            "sr_received": self.sr_received,
            "rr_received": self.rr_received,
            "rtt_samples": len(rtts),
            "rtt_ms_min": round(rtts[0] / 1e6, 3) if rtts else None,
            "rtt_ms_median": round(rtts[len(rtts) // 2] / 1e6, 3) if rtts else None,
            "rtt_ms_max": round(rtts[-1] / 1e6, 3) if rtts else None,
        }


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of a small list; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]
