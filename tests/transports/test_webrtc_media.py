"""DirectAudio between two real aiortc peers on loopback: RTP both ways, jitter buffers, and
RTCP sender reports rewritten by the rig (NTP and RTP of one instant, report blocks whose
LSR/DLSR give a round-trip time on the shared clock)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiortc import RTCSessionDescription

from rig.clock.base import MonotonicClock
from rig.transports.webrtc.media import DirectAudio
from rig.transports.webrtc.peer import gather_on, make_peer
from rig.transports.webrtc.rtp import BufferedFrame, RtpPacketizer
from tests.support.wallclock import unsteady_wall_clock_reason

pytestmark = pytest.mark.realtime


async def _pair(
    a: DirectAudio, b: DirectAudio
) -> tuple[object, object]:  # (offerer pc, answerer pc)
    pa, pb = make_peer(), make_peer()
    ta = pa.addTransceiver("audio", direction="sendrecv")
    a.bind(ta)
    with gather_on(["127.0.0.1"]):
        await pa.setLocalDescription(await pa.createOffer())
    await pb.setRemoteDescription(RTCSessionDescription(pa.localDescription.sdp, "offer"))
    pb.addTrack(b.track)
    tb = next(t for t in pb.getTransceivers() if t.kind == "audio")
    b.bind(tb)
    with gather_on(["127.0.0.1"]):
        await pb.setLocalDescription(await pb.createAnswer())
    b.attach(tb.sender.transport)
    await pa.setRemoteDescription(RTCSessionDescription(pb.localDescription.sdp, "answer"))
    a.attach(ta.sender.transport)
    for _ in range(500):
        if a.ready and b.ready:
            break
        await asyncio.sleep(0.01)
    assert a.ready and b.ready, "negotiation did not reach both senders"
    return pa, pb


async def test_direct_audio_both_ways_with_rtcp_from_the_rigs_own_counters() -> None:
    reason = await asyncio.to_thread(unsteady_wall_clock_reason)
    if reason:
        pytest.skip(reason)
    clock = MonotonicClock()
    got_a: list[BufferedFrame] = []
    got_b: list[BufferedFrame] = []
    a = DirectAudio(clock, jitter_prefetch=4, on_frames=got_a.extend)
    b = DirectAudio(clock, jitter_prefetch=0, on_frames=got_b.extend)
    pa, pb = await _pair(a, b)
    try:
        wall_minus_mono_ns = time.time_ns() - time.monotonic_ns()
        n = 110  # 2.2 s of media
        t0 = clock.now_ns()
        for k in range(n):
            await clock.sleep_until(t0 + k * 20_000_000)
            t_wire = await a.send(bytes([k % 256]) * 40)
            assert t_wire >= t0 + k * 20_000_000
            await b.send(bytes([255 - k % 256]) * 30)
        # aiortc sends an SR every 0.5-1.5 s at random: a side has a round trip once the
        # other's SR after its own came back (both ends' SRs go on after the media): 2.2 s
        # was not always enough (one run in five here); wait for both, up to 6 s
        await asyncio.sleep(0.3)
        for _ in range(120):
            if a.ledger.rtt and b.ledger.rtt:
                break
            await asyncio.sleep(0.05)
    finally:
        await pa.close()  # type: ignore[attr-defined]
        await pb.close()  # type: ignore[attr-defined]
    # b releases on arrival (prefetch 0): every payload, in order
    assert [f.payload for f in got_b] == [bytes([k % 256]) * 40 for k in range(n)]
    assert all(f.release_ns == f.arrival_ns for f in got_b)
    # a's buffer holds back the newest 4 (prefetch 4): each waited for four more packets
    assert [f.payload for f in got_a] == [bytes([255 - k % 256]) * 30 for k in range(n - 4)]
    waits_ms = [(f.release_ns - f.arrival_ns) / 1e6 for f in got_a]
    assert 60 < sorted(waits_ms)[len(waits_ms) // 2] < 100
    assert a.stats.lost == b.stats.lost == 0 and a.rtp_received == b.rtp_received == n
    assert a.foreign_rtp == b.foreign_rtp == 0  # aiortc's own receivers saw no media
    # all but the first packets or so (sent before SRTP was keyed on the receiving side)
    # were taken in the datagram callback, past aioice's queue
    assert a.fast_rtp >= n - 5 and b.fast_rtp >= n - 5, (a.fast_rtp, b.fast_rtp)
    assert a.srtp_errors == b.srtp_errors == 0
    # the report blocks each side sent quote the other's SR: RTT on the shared clock, loopback
    for side in (a, b):
        rtts = [s.rtt_ns / 1e6 for s in side.ledger.rtt]
        assert rtts and all(0.0 < r < 20.0 for r in rtts), rtts
    # b maps a's RTP timestamps onto a's wall clock through a's SR: NTP and RTP name one
    # instant, so each packet's timestamp maps to its deadline (not to a late send)
    assert a.packetizer is not None and b.remote_ssrc == a.packetizer.ssrc
    origin = b.remote_origin
    assert origin is not None
    errs = [
        b.ledger.rtp_to_server_ms(a.packetizer.ssrc, (origin + 960 * k) & 0xFFFF_FFFF)
        - (t0 + k * 20_000_000 + wall_minus_mono_ns) / 1e6
        for k in range(n)
    ]
    assert all(e is not None for e in errs)
    assert max(abs(e) for e in errs) < 2.0, errs  # type: ignore[arg-type]


async def test_datagram_fast_path_leaves_other_packets_to_aiortc_and_counts_forgeries() -> None:
    """Only SRTP of the negotiated Opus payload types is taken before aioice's queue: another
    payload type reaches aiortc still protected (and unprotects there), and a packet that fails
    SRTP authentication is counted and dropped, never filed as audio."""
    clock = MonotonicClock()
    got_b: list[BufferedFrame] = []
    a = DirectAudio(clock)
    b = DirectAudio(clock, jitter_prefetch=0, on_frames=got_b.extend)
    pa, pb = await _pair(a, b)
    try:
        await a.send(b"opus-1")
        await asyncio.sleep(0.1)
        assert [f.payload for f in got_b] == [b"opus-1"]
        assert a.packetizer is not None and a._dtls is not None
        pt = a.packetizer.payload_type
        other = RtpPacketizer(a.packetizer.ssrc + 1, (pt + 1) & 0x7F, sequence=7, timestamp=9)
        assert other.payload_type not in b._recv_pts
        a._sendto(a._dtls._tx_srtp.protect(other.packet(b"not-opus", 960)))
        forged = RtpPacketizer(a.packetizer.ssrc, pt, sequence=a.packetizer.sequence)
        b._ice.data_received(forged.packet(b"x" * 40, 960) + b"\x00" * 10, 1)  # no valid tag
        await asyncio.sleep(0.2)
    finally:
        await pa.close()  # type: ignore[attr-defined]
        await pb.close()  # type: ignore[attr-defined]
    assert b.foreign_rtp == 1  # came through aiortc's queue, unprotected there, handed on
    assert b.srtp_errors == 1
    assert [f.payload for f in got_b] == [b"opus-1"]


async def test_send_before_negotiation_is_a_transport_error() -> None:
    from rig.errors import TransportError

    with pytest.raises(TransportError):
        await DirectAudio(MonotonicClock()).send(b"x")
