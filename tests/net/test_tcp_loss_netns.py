"""TCP loss as the rig infers it from TCP_INFO, against the packet relay's own log.

`--impair` on a WebSocket models loss as the resend delay it causes (a user-space TCP relay
cannot lose bytes), so the kernel never retransmits there. Real segment loss needs a packet
path: the netns TAP relay (tests/support/netimpair.py) drops whole frames. The rig's socket
then retransmits, and `net.tcp` (rig.net.pathsample, TCP_INFO every --path-interval-s)
counts it in `total_retrans`. Truth from the relay's log: an uplink TCP data frame that
starts below the highest sequence number the connection already sent is a retransmission
(whatever the kernel resent: a lost segment, a tail-loss probe, a spurious timeout).
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import netimpair
from tests.support.netimpair import ImpairedLink, PacketRecord
from tests.support.runexit import assert_run_ok
from tests.support.runone import run_turn_what
from tests.support.wait import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.realtime]

PORT, LOSS = 8794, 0.04
#: how long a retransmission the kernel counted may take to reach the relay's read
HANDOFF_NS = 5_000_000


def _retransmissions_by(log: list[PacketRecord], sport: int, t_ns: int) -> int:
    """Uplink data frames of the rig's connection that resend bytes already sent, read by the
    relay before t_ns."""
    end: int | None = None  # highest sequence number sent so far (exclusive)
    repeats = 0
    for r in sorted(log, key=lambda r: r.arrival_ns):
        if r.arrival_ns > t_ns:
            break
        if r.direction != "up" or r.kind != "tcp" or r.sport != sport:
            continue
        if not r.payload_len or r.tcp_seq is None:
            continue  # a bare ACK (or SYN/FIN): no data
        if end is not None and 0 < (end - r.tcp_seq) % (1 << 32) < (1 << 31):
            repeats += 1  # starts below what was already sent
        seg_end = (r.tcp_seq + r.payload_len) % (1 << 32)
        if end is None or 0 < (seg_end - end) % (1 << 32) < (1 << 31):
            end = seg_end
    return repeats


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_tcp_info_retransmits_match_the_relay_log(tmp_path: Path) -> None:
    reason = netimpair.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with ImpairedLink(up_delay_ms=10, down_delay_ms=10, seed=4, loss=LOSS) as link:
        link.popen(
            [sys.executable, "-m", "rig", "sim", "--host", link.ns_addr, "--port", str(PORT)]
            + ["--latency-ms", "200", "--endpoint-silence-ms", "300", "--reply-s", "1.0"]
        )

        def listening() -> bool:
            try:
                with socket.create_connection((link.ns_addr, PORT), timeout=1.0):
                    return True
            except OSError:
                return False

        wait_for(listening, timeout_s=20.0, every_s=0.2, what="the sim in the namespace")
        one = run_turn_what(
            tmp_path, f"ws://{link.ns_addr}:{PORT}", "--path-interval-s", "0.2", timeout_s=90
        )
        log = link.packet_log()
    assert_run_ok(one.returncode, one.stderr, one.run_dir)
    events = _rows(one.run_dir / "rollouts" / "turn_what" / "events.jsonl")
    tcp = [e for e in events if e["kind"] == "net.tcp"]
    assert len(tcp) >= 10, len(tcp)
    # the rig's connection: the client port whose uplink carried the most payload
    ports: dict[int, int] = {}
    for p in log:
        if p.direction == "up" and p.kind == "tcp" and p.sport and p.payload_crc32 is not None:
            ports[p.sport] = ports.get(p.sport, 0) + 1
    sport = max(ports, key=lambda k: ports[k])
    # differences from the first sample: the handshake (a lost SYN is resent without payload)
    # is before it
    first = tcp[0]
    base_lo = _retransmissions_by(log, sport, first["t_ns"])
    base_hi = _retransmissions_by(log, sport, first["t_ns"] + HANDOFF_NS)
    compared = 0
    for e in tcp[1:]:
        got = e["total_retrans"] - first["total_retrans"]
        lo = _retransmissions_by(log, sport, e["t_ns"]) - base_hi
        hi = _retransmissions_by(log, sport, e["t_ns"] + HANDOFF_NS) - base_lo
        assert lo <= got <= hi, (e, lo, hi)
        compared += 1
    total = tcp[-1]["total_retrans"] - first["total_retrans"]
    assert total >= 3, f"too few retransmissions to compare ({total}) at {LOSS:.0%} loss"
    dropped = sum(
        1
        for p in log
        if p.direction == "up"
        and p.kind == "tcp"
        and p.sport == sport
        and p.payload_crc32 is not None
        and p.release_ns is None
        and first["t_ns"] < p.arrival_ns < tcp[-1]["t_ns"]
    )
    # every dropped data segment is resent (a resend the relay drops again is resent again);
    # the kernel may also resend one that was not lost (a spurious timeout), never fewer
    assert total >= dropped - 1, (total, dropped)  # the last drop may be resent after the end
    assert compared >= 9
