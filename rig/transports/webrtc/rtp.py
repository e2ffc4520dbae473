"""RTP for one Opus stream each way (sans-I/O): packetiser, header parser, receive statistics
and a jitter buffer. Nothing here reads a clock or touches a socket: times come in as `t_ns`.

How this works: the rig paces its own uplink, so it does not need aiortc's sender task to
turn frames into packets. `RtpPacketizer` writes the 12-byte header plus the negotiated
one-byte header extensions (the MID, constant for the stream, packed once) in front of each
Opus payload; sequence number and timestamp advance per packet. On the way in,
`parse_rtp` reads only what the receive path needs; `RtpReceiveStats` keeps RFC 3550's
counters (extended highest sequence, loss, interarrival jitter from shared-clock arrival
stamps) for the report blocks the rig sends back; `JitterBuffer` puts packets back in order
and releases each one once `prefetch` newer packets have arrived (aiortc's audio buffer
holds 4), so a listener's buffering delay stays measurable and configurable.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from rig.core.units import NS_PER_S

RTP_VERSION = 2
_HEADER = struct.Struct("!BBHII")
_EXT_HEADER = struct.Struct("!HH")


def one_byte_extensions(extensions: list[tuple[int, bytes]]) -> bytes:
    """RFC 8285 one-byte header extension block (profile 0xBEDE), padded to 32 bits."""
    body = b"".join(bytes([(x_id << 4) | (len(v) - 1)]) + v for x_id, v in extensions)
    for x_id, v in extensions:
        if not (0 < x_id < 15 and 0 < len(v) <= 16):
            raise ValueError(f"extension {x_id} ({len(v)} bytes) needs the two-byte form")
    body += b"\x00" * (-len(body) % 4)
    return _EXT_HEADER.pack(0xBEDE, len(body) // 4) + body if body else b""


class RtpPacketizer:
    """RTP headers for one outgoing stream: one call per payload, header extensions prepacked."""

    def __init__(
        self,
        ssrc: int,
        payload_type: int,
        *,
        sequence: int = 0,
        timestamp: int = 0,
        extensions: list[tuple[int, bytes]] | None = None,
    ) -> None:
        self.ssrc = ssrc
        self.payload_type = payload_type
        self.sequence = sequence & 0xFFFF
        self.timestamp = timestamp & 0xFFFF_FFFF
        self._ext = one_byte_extensions(extensions or [])
        self._first_byte = (RTP_VERSION << 6) | (0x10 if self._ext else 0)
        self.packets = 0
        self.octets = 0  # payload octets, as RTCP sender reports count them
        self.last_timestamp = self.timestamp  # of the latest packet made

    def packet(self, payload: bytes, samples: int, marker: bool = False) -> bytes:
        """The RTP packet carrying `payload`; the next one is stamped `samples` later."""
        second = self.payload_type | (0x80 if marker else 0)
        header = _HEADER.pack(self._first_byte, second, self.sequence, self.timestamp, self.ssrc)
        self.last_timestamp = self.timestamp
        self.sequence = (self.sequence + 1) & 0xFFFF
        self.timestamp = (self.timestamp + samples) & 0xFFFF_FFFF
        self.packets += 1
        self.octets += len(payload)
        return header + self._ext + payload


class RtpHeader(NamedTuple):
    """A tuple, not a dataclass: made once per packet, and a frozen dataclass costs several
    times a tuple to build."""

    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    marker: bool
    payload_offset: int
    payload_end: int


def parse_rtp(data: bytes) -> RtpHeader:
    """The parts of an RTP packet the receive path needs; ValueError when it is not one."""
    if len(data) < 12:
        raise ValueError(f"RTP packet of {len(data)} bytes")
    first, second, seq, ts, ssrc = _HEADER.unpack_from(data)
    if first >> 6 != RTP_VERSION:
        raise ValueError(f"RTP version {first >> 6}")
    offset = 12 + 4 * (first & 0x0F)
    if first & 0x10:
        if len(data) < offset + 4:
            raise ValueError("truncated RTP header extension")
        _, words = _EXT_HEADER.unpack_from(data, offset)
        offset += 4 + 4 * words
    end = len(data)
    if first & 0x20:
        end -= data[-1]
    if offset > end:
        raise ValueError("RTP header longer than the packet")
    return RtpHeader(second & 0x7F, seq, ts, ssrc, bool(second & 0x80), offset, end)


def seq_newer(a: int, b: int) -> bool:
    """16-bit sequence number `a` comes after `b` (RFC 1982 serial arithmetic)."""
    return a != b and ((a - b) & 0xFFFF) < 0x8000


class RtpReceiveStats:
    """RFC 3550 receive statistics of one incoming stream (A.3 loss, A.8 jitter)."""

    def __init__(self, clock_rate: int = 48_000) -> None:
        self.clock_rate = clock_rate
        self.base_seq: int | None = None
        self.max_seq = 0
        self.cycles = 0
        self.received = 0
        self._jitter_q4 = 0  # RTP units << 4
        self._last_transit: int | None = None
        self._last_ts: int | None = None
        self._expected_prior = 0
        self._received_prior = 0

    def add(self, seq: int, rtp_ts: int, t_ns: int) -> None:
        self.received += 1
        if self.base_seq is None:
            self.base_seq = self.max_seq = seq
        elif seq_newer(seq, self.max_seq):
            if seq < self.max_seq:
                self.cycles += 1 << 16
            self.max_seq = seq
        else:
            return  # reordered or duplicate: counted, no jitter sample
        if rtp_ts == self._last_ts:
            return
        arrival = t_ns * self.clock_rate // NS_PER_S
        transit = arrival - rtp_ts
        if self._last_transit is not None:
            d = abs(transit - self._last_transit)
            self._jitter_q4 += d - ((self._jitter_q4 + 8) >> 4)
        self._last_transit = transit
        self._last_ts = rtp_ts

    @property
    def extended_max(self) -> int:
        return self.cycles + self.max_seq

    @property
    def expected(self) -> int:
        return 0 if self.base_seq is None else self.extended_max - self.base_seq + 1

    @property
    def lost(self) -> int:
        """Cumulative packets lost, clamped to RTCP's signed 24 bits."""
        return max(-(1 << 23), min((1 << 23) - 1, self.expected - self.received))

    @property
    def jitter(self) -> int:
        """Interarrival jitter in RTP timestamp units."""
        return self._jitter_q4 >> 4

    def take_fraction_lost(self) -> int:
        """Fraction lost since the previous report, in 1/256 (advances the interval)."""
        expected = self.expected - self._expected_prior
        received = self.received - self._received_prior
        self._expected_prior = self.expected
        self._received_prior = self.received
        lost = expected - received
        return 0 if expected <= 0 or lost <= 0 else (lost << 8) // expected


class BufferedFrame(NamedTuple):
    """One Opus payload leaving the jitter buffer (a tuple: one is made per frame)."""

    sequence: int
    rtp_ts: int
    payload: bytes
    arrival_ns: int  # the loop read its packet from our socket (shared clock)
    release_ns: int  # arrival of the packet that released it (a listener could play it now)


class JitterBuffer:
    """Reorders by sequence number; a packet is released once `prefetch` newer ones arrived.

    With `prefetch=4` a clean stream of 20 ms packets waits 80 ms, like aiortc's audio buffer.
    A missing packet is given up (counted in `lost`) when the window passes it; one that
    arrives after its turn is dropped (`late`), as is a duplicate (`duplicates`).
    """

    def __init__(self, prefetch: int = 4, capacity: int = 64) -> None:
        if prefetch < 0 or capacity <= prefetch:
            raise ValueError(f"jitter buffer prefetch {prefetch}, capacity {capacity}")
        self.prefetch = prefetch
        self.capacity = capacity
        self._next: int | None = None  # extended sequence number due next
        self._highest: int | None = None
        self._held: dict[int, tuple[int, bytes, int]] = {}  # ext seq -> (rtp_ts, payload, t)
        self.lost = 0
        self.late = 0
        self.duplicates = 0

    def _extend(self, seq: int) -> int:
        ref = self._highest if self._highest is not None else seq
        return ref + ((seq - ref + 0x8000) & 0xFFFF) - 0x8000

    def add(self, seq: int, rtp_ts: int, payload: bytes, t_ns: int) -> list[BufferedFrame]:
        """File one packet that arrived at `t_ns`; returns the frames it releases, in order."""
        ext = self._extend(seq)
        if self._next is None:
            self._next = ext
        if ext < self._next:
            self.late += 1
            return []
        if ext in self._held:
            self.duplicates += 1
            return []
        self._held[ext] = (rtp_ts, payload, t_ns)
        if self._highest is None or ext > self._highest:
            self._highest = ext
        out: list[BufferedFrame] = []
        while self._highest - self._next >= self.prefetch or len(self._held) > self.capacity:
            item = self._held.pop(self._next, None)
            if item is None:
                self.lost += 1
            else:
                out.append(BufferedFrame(self._next & 0xFFFF, item[0], item[1], item[2], t_ns))
            self._next += 1
        return out

    def __len__(self) -> int:
        return len(self._held)
