"""Moshi dialect: Ogg/Opus framing, the 0x00 gate, and a rollout against a stand-in."""

import io

import numpy as np
import pytest

from rig.dialects.moshi import MoshiDialect
from rig.dialects.ogg import OggReader, OggWriter, crc32
from rig.errors import ConfigError, ProtocolError
from tests.fakes.harness import run_rollouts, tone_plan
from tests.fakes.moshi_server import FakeMoshiServer


def test_ogg_pages_demux_with_pyav_and_survive_any_split() -> None:
    av = pytest.importorskip("av")
    from rig.dialects.opus import OpusEncoder

    enc, w = OpusEncoder(24_000, 80), OggWriter(99)
    x = (np.sin(np.arange(1920 * 6) * 0.1) * 9000).astype(np.int16)
    stream = w.headers()
    packets = []
    for i in range(6):
        pk = enc.encode(x[i * 1920 : (i + 1) * 1920])
        packets += pk
        stream += w.page(pk, (i + 1) * 3840)
    with av.open(io.BytesIO(stream), format="ogg") as c:  # an independent reader
        assert sum(f.samples for f in c.decode(audio=0)) > 0
    for step in (1, 7, 300):
        r = OggReader()
        got = [p for i in range(0, len(stream), step) for p, _ in r.feed(stream[i : i + step])]
        assert got[2:] == packets and got[0].startswith(b"OpusHead")
    bad = bytearray(stream)
    bad[-1] ^= 0xFF
    with pytest.raises(ProtocolError, match="CRC"):
        OggReader().feed(bytes(bad))
    assert crc32(b"") == 0


def test_gate_kinds_and_frame_rules() -> None:
    d = MoshiDialect()
    with pytest.raises(ProtocolError, match="before the 0x00"):
        d.encode_audio(np.zeros(1920, np.int16), 0, 0, 0)
    (hs,) = d.decode(b"\x00", 1)
    assert d.ready and hs.kind == "handshake"
    (msg,) = d.encode_audio(np.zeros(1920, np.int16), 0, 0, 0)
    assert msg[:1] == b"\x01" and msg[1:5] == b"OggS"
    (tok,) = d.decode(b"\x02 hello", 2)
    assert tok.kind == "text" and tok.data["text"] == " hello"
    for bad in (b"\x09xx", "text", b"", b"\x02\xff\xfe"):
        with pytest.raises(ProtocolError):
            d.decode(bad, 0)
    with pytest.raises(ProtocolError, match="server error"):
        d.decode(b"\x05overloaded", 0)
    d2 = MoshiDialect()
    d2.decode(b"\x00", 0)
    with pytest.raises(ConfigError):
        d2.encode_audio(np.zeros(1000, np.int16), 0, 0, 0)


@pytest.mark.realtime
async def test_moshi_rollout_one_frame_per_frame_behind_the_gate(tmp_path) -> None:
    async with FakeMoshiServer(handshake_delay_s=0.3, delay_frames=3) as srv:
        rs = await run_rollouts(
            str(tmp_path),
            [("moshi", srv.url, "moshi", {}, tone_plan(24_000, turn_s=1.0, gap_s=1.0))],
            frame_ms=80,
        )
    r = rs["moshi"]
    assert r.metrics["status"] == "ok", r.metrics
    (conn,) = srv.conns
    assert conn.audio_before_handshake == 0 and conn.first_audio_ns > conn.handshake_ns
    ups = [c for c in r.chunks if c["dir"] == "up"]
    downs = [c for c in r.chunks if c["dir"] == "down"]
    assert conn.frames_in == len(ups) == conn.frames_out  # silence kept flowing to the end
    # every answered frame came back as audio (the last few may be in flight at close)
    assert len(ups) - 3 <= len(downs) <= len(ups)
    assert {c["sample_rate"] for c in downs} == {24_000}
    tokens = r.find("server.text")
    assert len(tokens) >= len(downs) - 3 and tokens[0]["text"] == " tok0"
    # the parrot answers 3 frames (240 ms) late: the tone comes back, never before it was sent
    (turn,) = r.find("turn.start")
    assert r.metrics["onsets_play_ns"], "the echoed tone was heard"
    assert r.metrics["onsets_play_ns"][0] - turn["t_ns"] >= 150e6
