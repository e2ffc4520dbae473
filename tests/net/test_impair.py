"""The --impair spec and the two link models (sans-I/O: times passed in, seeded)."""

from __future__ import annotations

import random

import pytest

from rig.core.units import NS_PER_MS, NS_PER_S
from rig.errors import ConfigError
from rig.net.impair import (
    FAST_RETX_WAIT_NS,
    PROFILES,
    DatagramLink,
    LinkSpec,
    StreamLink,
    parse_impair,
    shorthand,
)


def test_spec_both_directions_per_direction_and_profiles() -> None:
    imp = parse_impair("delay=75ms,jitter=10ms,loss=1%,rate=256kbit")
    assert imp.up == imp.down == LinkSpec(75.0, 10.0, 0.01, rate_bps=256_000)
    imp = parse_impair("up:delay=20ms,down:delay=0.08s,down:loss=2%,seed=7")
    assert (imp.up.delay_ms, imp.down.delay_ms, imp.down.loss, imp.up.loss) == (20, 80, 0.02, 0)
    assert imp.seed == 7 and imp.active
    prof = parse_impair("intercontinental,down:loss=5%")
    assert prof.profile == "intercontinental" and prof.up == PROFILES["intercontinental"][0]
    assert prof.down.loss == 0.05 and prof.down.delay_ms == PROFILES["intercontinental"][1].delay_ms
    assert parse_impair("rate=2mbit").up.rate_bps == 2e6
    assert parse_impair("rate=10kbps").up.rate_bps == 80_000  # tc: kbps is kilobytes/s
    assert parse_impair("delay=250us").up.delay_ms == pytest.approx(0.25)
    assert shorthand(0, 0, 0) is None
    sh = shorthand(20, 80, 5)
    assert sh is not None and (sh.up.delay_ms, sh.down.delay_ms, sh.up.jitter_ms) == (20, 80, 5)
    d = imp.as_dict()
    assert d["up"]["delay_ms"] == 20 and "fast retransmit" in d["tcp_loss_model"]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("", "key=value"),
        ("moon", "unknown profile"),
        ("delay=fast", "want a time"),
        ("loss=0.01", "percentage"),
        ("loss=150%", "between"),
        ("rate=256", "want a rate"),
        ("left:delay=1ms", "up: or down:"),
        ("wobble=3", "unknown key"),
        ("delay=100000s", "at most"),
        ("seed=x", "integer"),
    ],
)
def test_bad_specs_are_clear_errors(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_impair(spec)


def test_stream_link_delays_in_order_and_throttles() -> None:
    link = StreamLink(LinkSpec(30, 10), random.Random(1), reverse_delay_ms=30)
    last = 0
    for k in range(500):
        t = k * 20 * NS_PER_MS
        f = link.admit(t, 640)
        assert f.release_ns >= last and f.fate == "delivered"  # TCP never reorders
        assert 20 * NS_PER_MS <= f.delay_ns <= 40 * NS_PER_MS + 20 * NS_PER_MS
        last = f.release_ns
    # 256 kbit/s: 32 kB/s; 64 kB offered at once drains in 2 s, in order
    slow = StreamLink(LinkSpec(rate_bps=256_000), random.Random(1), 0)
    fates = [slow.admit(0, 1000) for _ in range(64)]
    assert fates[-1].release_ns == pytest.approx(2 * NS_PER_S, rel=1e-3)
    assert all(a.release_ns < b.release_ns for a, b in zip(fates, fates[1:], strict=False))


def test_stream_link_loss_is_a_late_resend_that_holds_back_what_follows() -> None:
    link = StreamLink(LinkSpec(20, loss=0.05), random.Random(3), reverse_delay_ms=40)
    fates = [link.admit(k * 20 * NS_PER_MS, 1448) for k in range(2000)]
    resent = [f for f in fates if f.fate == "retransmitted"]
    assert 0.03 < len(resent) / len(fates) < 0.07
    assert all(f.extra_ns == 60 * NS_PER_MS + FAST_RETX_WAIT_NS for f in resent)
    i = fates.index(resent[0])
    assert fates[i + 1].release_ns >= fates[i].release_ns  # head-of-line blocking


def test_datagram_link_loss_duplicates_reorder_and_queue_drops() -> None:
    link = DatagramLink(LinkSpec(10, 5, loss=0.1, duplicate=0.05, reorder=0.2), random.Random(5))
    out = [link.admit(k * 20 * NS_PER_MS, 200) for k in range(5000)]
    lost = sum(1 for o in out if o[0].fate == "lost")
    dup = sum(1 for o in out if len(o) == 2)
    assert 0.08 < lost / 5000 < 0.12 and 0.03 < dup / 4500 < 0.07
    plain = DatagramLink(LinkSpec(10, 15), random.Random(5))
    rel = [plain.admit(k * NS_PER_MS, 200)[0].release_ns for k in range(2000)]
    assert rel == sorted(rel)  # FIFO without reorder
    releases = [f.release_ns for o in out for f in o if f.fate != "lost"]
    assert releases != sorted(releases)  # with reorder some overtake
    tiny = DatagramLink(LinkSpec(rate_bps=8_000), random.Random(1))  # 1 kB/s
    fates = [tiny.admit(0, 100)[0].fate for _ in range(20)]
    assert fates[:5] == ["delivered"] * 5 and fates[-1] == "queue_drop"
