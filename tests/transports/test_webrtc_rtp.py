"""The rig's own RTP pieces (sans-I/O) and Opus settings, checked against aiortc and libopus."""

from __future__ import annotations

import numpy as np
import pytest
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap, RtpPacket
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.analysis.webrtc import OPUS_ONSET_LEAD_MS
from rig.core.onset import OnsetDetector
from rig.errors import ConfigError, ProtocolError
from rig.sim.engine import SimConfig, make_reply
from rig.transports.webrtc.codec import FRAME_SAMPLES, OpusFrameDecoder, OpusFrameEncoder
from rig.transports.webrtc.rtp import (
    JitterBuffer,
    RtpPacketizer,
    RtpReceiveStats,
    parse_rtp,
    seq_newer,
)
from rig.transports.webrtc.stats import ntp_to_unix_ms, unix_ns_to_ntp

MID_URI = "urn:ietf:params:rtp-hdrext:sdes:mid"


def _aiortc_map() -> HeaderExtensionsMap:
    m = HeaderExtensionsMap()
    m.configure(RTCRtpParameters(headerExtensions=[RTCRtpHeaderExtensionParameters(1, MID_URI)]))
    return m


def test_packets_parse_in_aiortc_with_the_mid_and_wrap_seq_and_timestamp() -> None:
    pz = RtpPacketizer(
        0xDEADBEEF, 111, sequence=0xFFFE, timestamp=0xFFFF_FC00, extensions=[(1, b"0")]
    )
    payloads = [bytes([k]) * (10 + k) for k in range(4)]
    raw = [pz.packet(p, 960, marker=k == 0) for k, p in enumerate(payloads)]
    for k, data in enumerate(raw):
        p = RtpPacket.parse(data, _aiortc_map())
        assert p.payload_type == 111 and p.ssrc == 0xDEADBEEF
        assert p.sequence_number == (0xFFFE + k) & 0xFFFF
        assert p.timestamp == (0xFFFF_FC00 + 960 * k) & 0xFFFF_FFFF
        assert p.extensions.mid == "0"
        assert p.payload == payloads[k] and p.marker == (k == 0)
        h = parse_rtp(data)
        assert data[h.payload_offset : h.payload_end] == payloads[k]
        assert (h.sequence, h.timestamp, h.ssrc) == (p.sequence_number, p.timestamp, p.ssrc)
    assert pz.packets == 4 and pz.octets == sum(map(len, payloads))
    assert pz.last_timestamp == (0xFFFF_FC00 + 3 * 960) & 0xFFFF_FFFF


def test_parse_reads_aiortcs_packets_with_csrc_padding_and_extensions() -> None:
    p = RtpPacket(payload_type=96, sequence_number=7, timestamp=123, ssrc=9, payload=b"abc")
    p.csrc = [1, 2]
    p.extensions.mid = "audio"
    p.padding_size = 3
    h = parse_rtp(p.serialize(_aiortc_map()))
    data = p.serialize(_aiortc_map())
    assert data[h.payload_offset : h.payload_end] == b"abc"
    assert (h.payload_type, h.sequence, h.timestamp, h.ssrc) == (96, 7, 123, 9)
    for bad in (b"\x80" * 5, b"\x40" + b"\x00" * 11, b"\x90" + b"\x00" * 11):
        with pytest.raises(ValueError):
            parse_rtp(bad)


def test_jitter_buffer_holds_prefetch_packets_and_reorders() -> None:
    jb = JitterBuffer(prefetch=4)
    out = []
    order = [10, 12, 11, 13, 14, 15, 16]
    for k, seq in enumerate(order):
        out += [(f.sequence, f.release_ns) for f in jb.add(seq, seq * 960, b"x", k * 20)]
    # 10 leaves when 14 arrives (four newer), 11 with 15, 12 with 16: in order, reordered
    assert out == [(10, 80), (11, 100), (12, 120)]
    assert jb.lost == jb.late == 0 and len(jb) == 4


def test_jitter_buffer_gives_up_on_loss_and_drops_late_and_duplicates() -> None:
    jb = JitterBuffer(prefetch=2)
    released = []
    for seq in [100, 101, 103, 104, 105]:  # 102 lost
        released += [f.sequence for f in jb.add(seq, 0, b"", 0)]
    assert released == [100, 101, 103]
    assert jb.lost == 1
    assert jb.add(102, 0, b"", 0) == [] and jb.late == 1  # its turn passed
    assert jb.add(105, 0, b"", 0) == [] and jb.duplicates == 1


def test_jitter_buffer_prefetch_zero_releases_at_arrival_across_a_wrap() -> None:
    jb = JitterBuffer(prefetch=0)
    got = [f.sequence for s in (0xFFFE, 0xFFFF, 0, 1) for f in jb.add(s, 0, b"", s)]
    assert got == [0xFFFE, 0xFFFF, 0, 1]


@settings(max_examples=200, deadline=None)
@given(st.permutations(list(range(40))), st.integers(0, 6), st.integers(0, 0xFFFF))
def test_jitter_buffer_releases_in_order_each_at_most_once(
    perm: list[int], prefetch: int, base: int
) -> None:
    jb = JitterBuffer(prefetch=prefetch)
    out = [f.sequence for k in perm for f in jb.add((base + k) & 0xFFFF, k, b"", 0)]
    ext = [(s - base) & 0xFFFF for s in out]
    assert ext == sorted(set(ext))  # in order, no duplicates
    # each packet was released, given up, is still held, or came late (after being given up,
    # or before the first packet seen, where the stream starts)
    accounted = len(out) + jb.lost + len(jb)
    assert accounted <= 40 <= accounted + jb.late


def test_receive_stats_loss_jitter_and_extended_sequence() -> None:
    s = RtpReceiveStats(48_000)
    t_ns = 0
    for k, seq in enumerate([65534, 65535, 0, 2, 3]):  # wraps; seq 1 lost
        t_ns = k * 20_000_000 + (5_000_000 if k == 2 else 0)  # one packet 5 ms late
        s.add(seq, (seq if seq > 100 else seq + 65536) * 960 & 0xFFFF_FFFF, t_ns)
    assert s.extended_max == 65536 + 3
    assert s.expected == 6 and s.received == 5 and s.lost == 1
    assert s.take_fraction_lost() == 256 // 6
    assert s.take_fraction_lost() == 0  # a new interval
    # RFC 3550 A.8: the 5 ms excursion (240 ticks at 48 kHz) enters at 1/16 per sample
    assert 0 < s.jitter < 240
    assert seq_newer(0, 65535) and not seq_newer(65535, 0)


def test_opus_encoder_one_packet_per_20_ms_and_buffers_partial_frames() -> None:
    x = (8000 * np.sin(np.arange(FRAME_SAMPLES * 10) * 0.05)).astype(np.int16)
    enc = OpusFrameEncoder()
    assert [len(enc.encode(x[k * 960 : (k + 1) * 960])) for k in range(10)] == [1] * 10
    enc2 = OpusFrameEncoder()
    counts = [len(enc2.encode(x[k : k + 441])) for k in range(0, x.size, 441)]
    assert sum(counts) == 10 and max(counts) == 1
    assert enc.describe()["dtx"] is False and enc.describe()["complexity"] == 5
    with pytest.raises(ConfigError):
        OpusFrameEncoder(complexity=11)
    with pytest.raises(ConfigError, match="transient"):
        OpusFrameEncoder(complexity=0)
    with pytest.raises(ConfigError):
        OpusFrameEncoder(application="music")


@pytest.mark.parametrize(("application", "complexity"), [("audio", 5), ("audio", 2), ("voip", 5)])
def test_opus_settings_keep_the_312_sample_lookahead(application: str, complexity: int) -> None:
    """decompose.py subtracts 6.5 ms of codec lookahead: every setting offered must have it."""
    rng = np.random.default_rng(0)
    x = (6000 * rng.standard_normal(960 * 30)).clip(-30000, 30000).astype(np.int16)
    enc, dec = OpusFrameEncoder(complexity=complexity, application=application), OpusFrameDecoder()
    y = np.concatenate([dec.decode(p) for k in range(30) for p in enc.encode(x[k * 960 :][:960])])
    yf, xf = y.astype(float), x.astype(float)
    lag = max(
        range(600), key=lambda lag: float(np.dot(yf[lag + 2000 : lag + 20000], xf[2000:20000]))
    )
    assert lag == 312
    assert y.dtype == np.int16 and y.size == x.size


@pytest.mark.parametrize("backend", ["libopus", "pyav"])
def test_an_empty_opus_payload_decodes_to_nothing_and_the_decoder_keeps_working(
    backend: str,
) -> None:
    """An empty payload once went to PyAV as a flush packet: every later frame then failed."""
    enc, dec = OpusFrameEncoder(backend=backend), OpusFrameDecoder(backend)
    tone = (8000 * np.sin(np.arange(960 * 3) * 0.05)).astype(np.int16)
    packets = [p for k in range(3) for p in enc.encode(tone[k * 960 :][:960])]
    assert dec.decode(packets[0]).size == FRAME_SAMPLES
    assert dec.decode(b"").size == 0
    assert [dec.decode(p).size for p in packets[1:]] == [FRAME_SAMPLES, FRAME_SAMPLES]
    with pytest.raises(ProtocolError, match="undecodable Opus packet"):
        dec.decode(b"\xff")  # a code-3 TOC byte with no frame count
    assert dec.decode(packets[2]).size == FRAME_SAMPLES


@pytest.mark.parametrize(("application", "complexity"), [("audio", 5), ("audio", 2), ("voip", 10)])
def test_libopus_direct_and_pyav_give_identical_packets_and_pcm(
    application: str, complexity: int
) -> None:
    """The ctypes backend is the same libopus with the same settings: byte-identical packets
    and sample-identical decoded audio, so switching backends changes no timing or audio."""
    rng = np.random.default_rng(1)
    t = np.arange(960 * 40) / 48_000
    x = (6000 * np.sin(2 * np.pi * 220 * t) + 800 * rng.standard_normal(t.size)).astype(np.int16)
    encs = [
        OpusFrameEncoder(complexity=complexity, application=application, backend=b)
        for b in ("libopus", "pyav")
    ]
    assert [e.describe()["backend"] for e in encs] == ["libopus", "pyav"]
    direct, pyav = ([p for k in range(40) for p in e.encode(x[k * 960 :][:960])] for e in encs)
    assert direct == pyav and len(direct) == 40
    d1, d2 = OpusFrameDecoder("libopus"), OpusFrameDecoder("pyav")
    y_direct = np.concatenate([d1.decode(p) for p in direct])
    y_pyav = np.concatenate([d2.decode(p) for p in direct])
    assert y_direct.dtype == np.int16 and np.array_equal(y_direct, y_pyav)


def test_an_unknown_opus_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Opus backend"):
        OpusFrameEncoder(backend="opuslib")
    with pytest.raises(ConfigError, match="Opus backend"):
        OpusFrameDecoder("ffmpeg")


def _decoded_onset_lead_ms(x: np.ndarray, onset: int, complexity: int) -> float:
    """How much earlier than the sent onset (plus the lookahead) the rig finds it decoded."""
    enc, dec = OpusFrameEncoder(complexity=complexity), OpusFrameDecoder()
    y = np.concatenate(
        [dec.decode(p) for k in range(0, x.size, 960) for p in enc.encode(x[k:][:960])]
    )
    det = OnsetDetector(48_000)  # the rig's own: first sample above -40 dBFS after a gap
    found = next(
        k + o for k in range(0, y.size, 960) if (o := det.feed(y[k:][:960], k)) is not None
    )
    return (onset + 312 - found) / 48.0


@pytest.mark.parametrize("complexity", [1, 2, 5, 10])
@pytest.mark.parametrize("voice", ["tone", "whisper"])
def test_a_decoded_onset_leads_the_sent_one_by_at_most_the_stated_bound(
    complexity: int, voice: str
) -> None:
    """Pre-echo: at full level, across onset offsets in the frame, the lead stays within
    OPUS_ONSET_LEAD_MS (which rig.analysis adds to every error that ends at a WebRTC
    onset), is never negative by more than a few samples, and is not always small: the bound
    is needed (a sweep of every offset found 6.1 ms; complexity 0, refused, 14 ms)."""
    reply = make_reply(SimConfig(reply_voice=voice, reply_level_dbfs=-3.0))[: 960 * 3]
    leads = []
    for offset in range(0, 960, 7):
        onset = 960 * 4 + offset
        x = np.zeros(960 * 9, np.int16)
        x[onset : onset + reply.size] = reply[: x.size - onset]
        leads.append(_decoded_onset_lead_ms(x, onset, complexity))
    assert max(leads) <= OPUS_ONSET_LEAD_MS, max(leads)
    assert min(leads) >= -0.1, min(leads)
    assert max(leads) >= 2.5, max(leads)


def test_sender_report_ntp_time_round_trips_through_unix_ns() -> None:
    # aiortc's own conversion of the same instant (datetime -> NTP) agrees to the microsecond
    import datetime

    from aiortc.clock import datetime_to_ntp

    unix_ns = 1_767_225_600_123_456_000  # 2026-01-01 00:00:00.123456 UTC
    ntp = unix_ns_to_ntp(unix_ns)
    dt = datetime.datetime.fromtimestamp(unix_ns // 1000 / 1e6, datetime.UTC)
    assert abs(ntp - datetime_to_ntp(dt)) <= (1 << 32) // 1_000_000
    assert ntp_to_unix_ms(ntp) == pytest.approx(unix_ns / 1e6, abs=1e-3)
    assert ntp >> 32 == unix_ns // 1_000_000_000 + 2_208_988_800
