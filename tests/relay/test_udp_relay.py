"""The UDP media relay (rig.relay.udpprocess, its own process) and the SDP rewriting that puts
it on a WebRTC path (rig.net.sdpcand)."""

from __future__ import annotations

import asyncio
import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from rig.errors import ProtocolError
from rig.net.impair import parse_impair
from rig.net.sdpcand import candidates, check_bundled, pick_far, route_through
from rig.relay.datagram import classify
from rig.relay.udpprocess import UdpRelay

OFFER = "\r\n".join(
    [
        "v=0",
        "o=- 1 1 IN IP4 0.0.0.0",
        "s=-",
        "t=0 0",
        "a=group:BUNDLE 0 1",
        "m=audio 43229 UDP/TLS/RTP/SAVPF 96",
        "c=IN IP4 10.0.0.5",
        "a=mid:0",
        "a=rtcp-mux",
        "a=candidate:a 1 udp 2130706431 10.0.0.5 43229 typ host",
        "a=candidate:b 1 udp 2130706175 192.168.1.9 43230 typ host",
        "a=candidate:c 1 udp 1694498815 203.0.113.7 5000 typ srflx raddr 10.0.0.5 rport 43229",
        "a=candidate:d 1 tcp 1518280447 10.0.0.5 9 typ host tcptype active",
        "a=candidate:e 1 udp 2130706431 fe80::1 43231 typ host",
        "a=end-of-candidates",
        "a=ice-ufrag:K3kH",
        "a=fingerprint:sha-256 1E:09",
        "m=application 52901 UDP/DTLS/SCTP webrtc-datachannel",
        "c=IN IP4 10.0.0.5",
        "a=mid:1",
        "a=candidate:a 1 udp 2130706431 10.0.0.5 52901 typ host",
        "a=end-of-candidates",
        "",
    ]
)


def test_candidates_are_read_and_the_far_one_chosen() -> None:
    cands = candidates(OFFER)
    assert [(c.host, c.port, c.transport, c.kind) for c in cands][:4] == [
        ("10.0.0.5", 43229, "udp", "host"),
        ("192.168.1.9", 43230, "udp", "host"),
        ("203.0.113.7", 5000, "udp", "srflx"),
        ("10.0.0.5", 9, "tcp", "host"),
    ]
    assert cands[-1].mid_index == 1
    # the target's own address wins; otherwise the highest-priority IPv4 UDP one
    assert pick_far(cands, "192.168.1.9") == ("192.168.1.9", 43230)
    assert pick_far(cands, None) == ("10.0.0.5", 43229)
    only_v6 = [c for c in cands if ":" in c.host]
    with pytest.raises(ProtocolError, match="no IPv4 UDP candidate"):
        pick_far(only_v6, None)


def test_route_through_leaves_one_candidate_per_section_and_nothing_else_changed() -> None:
    routed = route_through(OFFER, "127.0.0.1", 40000)
    cands = candidates(routed)
    assert [(c.host, c.port, c.mid_index) for c in cands] == [
        ("127.0.0.1", 40000, 0),
        ("127.0.0.1", 40000, 1),
    ]
    assert "m=audio 40000 UDP/TLS/RTP/SAVPF 96" in routed
    assert "10.0.0.5" not in routed and "203.0.113.7" not in routed
    # credentials, fingerprints and everything else pass untouched
    for keep in ("a=ice-ufrag:K3kH", "a=fingerprint:sha-256 1E:09", "a=rtcp-mux"):
        assert keep in routed
    check_bundled(routed, "offer")
    with pytest.raises(ProtocolError, match="BUNDLE"):
        check_bundled(OFFER.replace("a=group:BUNDLE 0 1\r\n", ""), "the answer")
    with pytest.raises(ProtocolError, match="rtcp-mux"):
        check_bundled(OFFER.replace("a=rtcp-mux\r\n", ""), "the answer")


def _rtp(seq: int, payload: bytes = b"x" * 60) -> bytes:
    return struct.pack("!BBHII", 0x80, 111, seq, seq * 960, 0x1234) + payload


def test_classify_by_first_byte() -> None:
    assert classify(b"\x00\x01" + b"\x00" * 18)["kind"] == "stun"
    assert classify(b"\x16\xfe\xfd" + b"\x00" * 10)["kind"] == "dtls"
    rtp = classify(_rtp(7))
    assert rtp == {"kind": "rtp", "pt": 111, "rtp_seq": 7, "rtp_ts": 7 * 960, "ssrc": 0x1234}
    rtcp = classify(struct.pack("!BBHI", 0x81, 201, 7, 0xABCD) + b"\x00" * 24)
    assert rtcp == {"kind": "rtcp", "rtcp_pt": 201, "ssrc": 0xABCD}


class _Rx(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[tuple[int, int, tuple[str, int]]] = []  # (rtp seq, t_ns, source)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        t = time.monotonic_ns()
        self.got.append((struct.unpack_from("!H", data, 2)[0], t, addr))


async def test_relay_process_delays_drops_and_logs_every_datagram(tmp_path: Path) -> None:
    log_path = tmp_path / "impair.jsonl"
    relay = UdpRelay(parse_impair("up:delay=20ms,down:delay=5ms,loss=20%,seed=5"))
    relay.start(str(log_path))
    loop = asyncio.get_running_loop()
    try:
        rig_t, rig_rx = await loop.create_datagram_endpoint(_Rx, local_addr=("127.0.0.1", 0))
        far_t, far_rx = await loop.create_datagram_endpoint(_Rx, local_addr=("127.0.0.1", 0))
        stray_t, _ = await loop.create_datagram_endpoint(_Rx, local_addr=("127.0.0.1", 0))
        rig_addr = rig_t.get_extra_info("sockname")[:2]
        far_addr = far_t.get_extra_info("sockname")[:2]
        flow = await relay.call(op="open", rig=list(rig_addr), far_bind="127.0.0.1")
        await relay.call(op="far", flow=flow["flow"], addr=list(far_addr))
        rig_side, far_side = tuple(flow["rig_side"]), tuple(flow["far_side"])
        sent: dict[tuple[str, int], int] = {}
        for k in range(100):
            sent[("up", k)] = time.monotonic_ns()
            rig_t.sendto(_rtp(k), rig_side)
            sent[("down", k)] = time.monotonic_ns()
            far_t.sendto(_rtp(k), far_side)
            stray_t.sendto(_rtp(1000 + k), rig_side)  # not the rig's address: dropped
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.2)
        for t in (rig_t, far_t, stray_t):
            t.close()
    finally:
        await asyncio.to_thread(relay.stop)
    rows = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert relay.flows == 1 and relay.stray == 100 and relay.datagrams == 200
    for direction, rx, src, want_ms in (
        ("up", far_rx, far_side, 20.0),
        ("down", rig_rx, rig_side, 5.0),
    ):
        mine = [r for r in rows if r["dir"] == direction]
        assert len(mine) == 100 and all(r["kind"] == "rtp" for r in mine)
        delivered = {r["rtp_seq"]: r for r in mine if r["fate"] == "delivered"}
        lost = {r["rtp_seq"] for r in mine if r["fate"] == "lost"}
        assert 5 <= len(lost) <= 40  # 20 % of 100, seeded
        got = {seq: t for seq, t, _ in rx.got}
        assert set(got) == set(delivered), "received exactly what the log says was delivered"
        assert all(addr == src for _, _, addr in rx.got)  # it comes from the relay's socket
        rest_ms = []
        for seq, t_rx in got.items():
            r = delivered[seq]
            assert r["t_out_ns"] - r["t_in_ns"] >= want_ms * 1e6
            # what the receiver measured is what the log holds, plus the two kernel hops and
            # the receiving loop's wake-up (this test's own loop: late under load, never early)
            one_way_ms = (t_rx - sent[(direction, seq)]) / 1e6
            rest_ms.append(one_way_ms - (r["t_out_ns"] - r["t_in_ns"]) / 1e6)
        assert min(rest_ms) >= 0.0 and float(np.median(rest_ms)) < 2.0, sorted(rest_ms)
        assert all(r["t_out_ns"] is None for r in mine if r["fate"] == "lost")


def test_relay_refuses_commands_it_cannot_do() -> None:
    async def go() -> None:
        with UdpRelay(parse_impair("delay=1ms")) as relay:
            relay.start()
            with pytest.raises(Exception, match="KeyError|unknown op"):
                await relay.call(op="far", flow=99, addr=["127.0.0.1", 9])
            with pytest.raises(Exception, match="unknown op"):
                await relay.call(op="nope", flow=0)

    asyncio.run(go())


def test_far_bind_is_loopback_for_loopback() -> None:
    from rig.relay.udpprocess import far_bind_address

    assert far_bind_address("127.0.0.1") == far_bind_address("127.0.0.2") == "127.0.0.1"
