"""The TAP relay that stands in for netem: its delay rule, and real traffic through a namespace.

The netns tests compare what a client and a server (inside the namespace) measure on the shared
monotonic clock against the relay's own per-packet log, the ground truth the clock tests use.
"""

from __future__ import annotations

import socket
import statistics
import struct
import subprocess
import time
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import netimpair
from tests.support.netimpair import DelaySchedule, ImpairedLink

MS = 1_000_000


@pytest.fixture
def netns_ok() -> None:
    reason = netimpair.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


# ----------------------------------------------------------------------------- delay rule


@given(
    gaps_ns=st.lists(st.integers(0, 20 * MS), min_size=1, max_size=200),
    delay_ms=st.integers(0, 100),
    jitter_ms=st.integers(0, 50),
    distribution=st.sampled_from(["uniform", "normal"]),
    seed=st.integers(0, 2**32),
)
def test_schedule_is_fifo_and_never_early(
    gaps_ns: list[int], delay_ms: int, jitter_ms: int, distribution: str, seed: int
) -> None:
    schedule = DelaySchedule(
        delay_ms * MS,
        jitter_ms * MS,
        distribution=distribution,  # type: ignore[arg-type]
        seed=seed,
    )
    arrival_ns, previous_target_ns = 0, -1
    for gap_ns in gaps_ns:
        arrival_ns += gap_ns
        slot = schedule.schedule(arrival_ns)
        assert slot is not None
        assert slot.sampled_delay_ns >= 0
        assert slot.target_ns >= arrival_ns + slot.sampled_delay_ns
        assert slot.target_ns >= previous_target_ns
        # held longer than sampled only to keep the order
        if slot.target_ns > arrival_ns + slot.sampled_delay_ns:
            assert slot.target_ns == previous_target_ns
        if distribution == "uniform":
            assert abs(slot.sampled_delay_ns - delay_ms * MS) <= jitter_ms * MS
        previous_target_ns = slot.target_ns


def test_schedule_is_seeded_and_samples_the_distribution() -> None:
    def sampled(seed: int) -> list[int]:
        schedule = DelaySchedule(20 * MS, 5 * MS, seed=seed)
        return [schedule.sample_delay_ns() for _ in range(4000)]

    assert sampled(7) == sampled(7) != sampled(8)
    delays_ms = [d / MS for d in sampled(7)]
    assert statistics.fmean(delays_ms) == pytest.approx(20.0, abs=0.3)
    # uniform on [15, 25]: standard deviation 10 / sqrt(12)
    assert statistics.stdev(delays_ms) == pytest.approx(10 / 12**0.5, rel=0.05)


def test_schedule_loss_rate_and_bad_input() -> None:
    schedule = DelaySchedule(0, loss=0.25, seed=1)
    lost = sum(schedule.schedule(i) is None for i in range(4000))
    assert lost / 4000 == pytest.approx(0.25, abs=0.03)
    with pytest.raises(ValueError, match="loss"):
        DelaySchedule(0, loss=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        ImpairedLink(up_delay_ms=-1.0)


def test_describe_frame_strips_ethernet_padding() -> None:
    payload = b"hi"
    udp = struct.pack("!HHHH", 5000, 6000, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton("10.231.0.1"), socket.inet_aton("10.231.0.2"))  # fmt: skip
    frame = bytes(12) + b"\x08\x00" + ip + udp
    frame += bytes(60 - len(frame))  # minimum Ethernet frame
    info = netimpair.describe_frame(frame)
    assert info == dict(kind="udp", src="10.231.0.1", dst="10.231.0.2", sport=5000, dport=6000,
                        payload_crc32=zlib.crc32(payload), payload_len=2)  # fmt: skip


# ----------------------------------------------------------------------------- real packets


def _tcp_round_trips(host: str, port: int, count: int) -> list[tuple[bytes, int]]:
    with socket.create_connection((host, port), timeout=5.0) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = []
        for i in range(count):
            message = struct.pack("!8sq", b"rigprobe", i)
            t0_ns = time.monotonic_ns()
            sock.sendall(message)
            got = b""
            while len(got) < len(message):
                got += sock.recv(len(message) - len(got))
            out.append((message, time.monotonic_ns() - t0_ns))
            assert got == message
        return out


def _relay_rtts_ns(
    log: list[netimpair.PacketRecord], messages: list[bytes], port: int
) -> list[int]:
    """Per message: what the relay held its request (up) plus its echo (down)."""
    held: dict[tuple[str, int], int] = {}
    for r in log:
        if r.kind == "tcp" and r.payload_crc32 is not None and r.delay_ns is not None:
            if port in (r.sport, r.dport):
                held[(r.direction, r.payload_crc32)] = r.delay_ns
    return [held[("up", zlib.crc32(m))] + held[("down", zlib.crc32(m))] for m in messages]


@pytest.mark.netns
def test_tcp_rtt_matches_the_relay_setting(netns_ok: None) -> None:
    with ImpairedLink(up_delay_ms=20, down_delay_ms=30, seed=1) as link:
        port = netimpair.start_echo(link, "tcp")
        samples = _tcp_round_trips(link.ns_addr, port, 50)
        log = link.packet_log()
    rtts_ms = [rtt_ns / MS for _, rtt_ns in samples]
    assert min(rtts_ms) == pytest.approx(50.0, abs=2.0)
    assert statistics.median(rtts_ms) == pytest.approx(50.0, abs=2.0)
    assert any(r.kind == "arp" for r in log), "ARP goes through the relay too"
    relay_ms = [ns / MS for ns in _relay_rtts_ns(log, [m for m, _ in samples], port)]
    assert min(relay_ms) >= 50.0  # the relay never releases early


@pytest.mark.netns
def test_tcp_rtt_spread_follows_the_relay_jitter(netns_ok: None) -> None:
    with ImpairedLink(up_delay_ms=20, down_delay_ms=30, jitter_ms=5, seed=3) as link:
        port = netimpair.start_echo(link, "tcp")
        samples = _tcp_round_trips(link.ns_addr, port, 50)
        log = link.packet_log()
    rtts_ns = [rtt_ns for _, rtt_ns in samples]
    relay_ns = _relay_rtts_ns(log, [m for m, _ in samples], port)
    # The sum of two uniform ±5 ms delays: sd 4.1 ms. The client sees that spread, and each
    # round trip is what the relay held it plus a small stack cost, never less.
    assert statistics.stdev(rtts_ns) / MS > 2.0
    excess_ms = [(m - r) / MS for m, r in zip(rtts_ns, relay_ns, strict=True)]
    assert min(excess_ms) >= 0.0
    assert statistics.median(excess_ms) < 2.0
    assert statistics.correlation(rtts_ns, relay_ns) > 0.9


def _warm_up_arp(host: str, port: int) -> None:
    """One exchange first: a datagram waiting for ARP waits in the kernel, not in the relay."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5.0)
        sock.sendto(b"warm-up", (host, port))
        sock.recv(64)


@pytest.mark.netns
def test_udp_one_way_delay_against_the_relay_log(netns_ok: None) -> None:
    # 4 ms spacing with ±6 ms jitter: frames catch up with each other and must stay in order.
    with ImpairedLink(up_delay_ms=20, down_delay_ms=30, jitter_ms=6, seed=5) as link:
        port = netimpair.start_echo(link, "udp")
        _warm_up_arp(link.ns_addr, port)
        samples = netimpair.udp_round_trips(link.ns_addr, port, 100, 0.004)
        log = link.packet_log()
    assert len(samples) == 100
    up = {r.payload_crc32: r for r in log if r.kind == "udp" and r.direction == "up"}
    server_rx = [srv_rx for _, srv_rx, _, _ in samples]
    assert server_rx == sorted(server_rx), "the relay reordered a direction"
    held_back = 0
    for seq, (tx_ns, srv_rx_ns, _srv_tx_ns, _rx_ns) in enumerate(samples):
        record = up[zlib.crc32(struct.pack("!q", seq))]
        assert record.release_ns is not None and record.target_ns is not None
        assert record.sampled_delay_ns is not None
        # causal order on the one clock shared by both namespaces
        assert tx_ns <= record.arrival_ns < record.release_ns <= srv_rx_ns
        assert 14 * MS <= record.sampled_delay_ns <= 26 * MS
        one_way_ms = (srv_rx_ns - tx_ns) / MS
        relay_ms = (record.release_ns - record.arrival_ns) / MS
        assert relay_ms >= record.sampled_delay_ns / MS
        assert one_way_ms - relay_ms < 5.0  # stack + wake-up, outside the relay
        held_back += record.target_ns > record.arrival_ns + record.sampled_delay_ns
    assert held_back > 0, "no frame was held to keep the order: the test lost its point"
    down = [r.delay_ns for r in log if r.kind == "udp" and r.direction == "down"]
    assert min(d for d in down if d is not None) >= 24 * MS


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


@pytest.mark.netns
def test_two_links_coexist_and_cleanup_leaves_nothing(netns_ok: None) -> None:
    class Boom(Exception):
        pass

    names: list[str] = []
    with pytest.raises(Boom):
        with ImpairedLink() as a, ImpairedLink(up_delay_ms=1) as b:
            names = [a.netns, b.netns, a.host_ifname, b.host_ifname, a.ns_ifname, b.ns_ifname]
            assert a.host_addr != b.host_addr and a.ns_addr != b.ns_addr
            for link in (a, b):
                assert link.netns in _namespaces()
                server = link.popen(["sleep", "30"])
                port = netimpair.start_echo(link, "tcp")
                assert _tcp_round_trips(link.ns_addr, port, 2)
            raise Boom
    assert server.poll() is not None, "a process started in the namespace survived close()"
    namespaces, links = _namespaces(), _links()
    for name in names:
        assert name not in namespaces and f" {name}:" not in links


@pytest.mark.netns
def test_sweeper_removes_namespaces_of_dead_processes(netns_ok: None) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{netimpair.NETNS_PREFIX}{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in netimpair.sweep_stale()
        assert stale not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
