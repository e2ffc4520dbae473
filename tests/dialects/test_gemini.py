"""Gemini Live dialect: setup handshake, stateful 16 kHz resampling, activity modes, faults."""

import json

import numpy as np
import pytest

from rig.dialects.gemini import GeminiDialect
from rig.errors import ProtocolError
from tests.fakes.gemini_server import FakeGeminiServer
from tests.fakes.harness import run_rollouts, tone_plan


def test_setup_and_manual_activity_messages() -> None:
    d = GeminiDialect(activity="manual")
    (setup,) = [json.loads(m) for m in d.open_messages()]
    assert setup["setup"]["realtimeInputConfig"] == {
        "automaticActivityDetection": {"disabled": True}
    }
    assert not d.ready
    (ev,) = d.decode(b'{"setupComplete": {}}', 5)
    assert d.ready and ev.kind == "setup_complete"
    assert json.loads(d.encode_event("turn_start", {}, 0)[0]) == {
        "realtimeInput": {"activityStart": {}}
    }
    assert json.loads(d.encode_event("turn_end", {}, 0)[0]) == {
        "realtimeInput": {"activityEnd": {}}
    }
    assert GeminiDialect().encode_event("turn_start", {}, 0) == []


def test_streaming_resampler_matches_whole_signal_resampling() -> None:
    """20 ms frames through the dialect = the whole tone resampled at once (state carried)."""
    import soxr

    rate = 24_000
    t = np.arange(rate * 2) / rate
    x = (np.sin(2 * np.pi * 440 * t) * 10_000).astype(np.int16)
    d = GeminiDialect(sample_rate=rate)
    got = []
    for k in range(0, x.size, 480):
        for m in d.encode_audio(x[k : k + 480], k // 480, 0, k):
            audio = json.loads(m)["realtimeInput"]["audio"]
            assert audio["mimeType"] == "audio/pcm;rate=16000"
            got.append(np.frombuffer(__import__("base64").b64decode(audio["data"]), "<i2"))
    y = np.concatenate(got).astype(np.int32)
    ref = soxr.resample(x, rate, 16_000, quality="HQ").astype(np.int32)
    n = min(y.size, ref.size) - 200
    assert y.size > 31_000
    assert np.max(np.abs(y[200:n] - ref[200:n])) <= 2  # no per-chunk edge transients


def test_downlink_audio_events_and_garbage() -> None:
    d = GeminiDialect()
    pcm = (np.arange(240) * 10).astype("<i2")
    b64 = __import__("base64").b64encode(pcm.tobytes()).decode()
    msg = {
        "serverContent": {
            "modelTurn": {
                "parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": b64}}]
            },
            "interrupted": True,
        }
    }
    audio, ev = d.decode(json.dumps(msg).encode(), 3)
    assert audio.sample_rate == 24_000 and np.array_equal(audio.pcm, pcm)
    assert ev.kind == "interrupted"
    for bad in ("nope", '{"mystery": 1}', '{"serverContent": 3}'):
        with pytest.raises(ProtocolError):
            d.decode(bad, 0)


@pytest.mark.realtime
async def test_gemini_rollouts_auto_manual_and_faults(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "gm-secret-key-42")
    async with FakeGeminiServer(reply_s=0.8) as srv:
        rs = await run_rollouts(
            str(tmp_path),
            [
                ("auto", srv.url, "gemini", {"sample_rate": 24_000}, tone_plan(24_000)),
                ("manual", srv.url, "gemini", {"activity": "manual"}, tone_plan(16_000)),
                ("dead", srv.url + "?fault=disconnect&at_s=1.0", "gemini", {}, tone_plan(16_000)),
                ("junk", srv.url + "?fault=malformed&at_s=0.8", "gemini", {}, tone_plan(16_000)),
            ],
        )
    for rid in ("auto", "manual"):
        m = rs[rid].metrics
        assert m["status"] == "ok", (rid, m)
        assert m["system_sample_rate"] == 24_000
        assert m["downlink"]["audio_s"] == pytest.approx(0.8, abs=0.01)
        assert any(r.get("latency_ms") for r in m["responses"])
        assert rs[rid].find("server.turn_complete")
    assert rs["dead"].metrics["status"] == "transport_error"
    assert rs["junk"].metrics["status"] == "protocol_error"
    by_rate = {c.setup.get("realtimeInputConfig") is not None: c for c in srv.conns if c.setup}
    manual = by_rate[True]
    assert manual.markers[:2] == ["activityStart", "activityEnd"]
    assert all(c.headers.get("x-goog-api-key") == "gm-secret-key-42" for c in srv.conns)
    # the 24 kHz session audio reached the server as 16 kHz: sample count matches duration
    auto = rs["auto"]
    sent_s = sum(c["n_samples"] for c in auto.chunks if c["dir"] == "up") / 24_000
    got = [
        c
        for c in srv.conns
        if c.setup
        and c.setup.get("realtimeInputConfig") is None
        and sum(a.size for a in c.audio) > 0
    ]
    got_s = [sum(a.size for a in c.audio) / 16_000 for c in got]
    # all of it, less what the HQ filter holds back (~12 ms) and the last frames in flight
    assert any(abs(s - sent_s) < 0.05 for s in got_s), (got_s, sent_s)


@pytest.mark.realtime
async def test_text_history_goes_as_client_content_before_the_audio(tmp_path) -> None:
    history = [
        {"role": "user", "text": "My name is Ada."},
        {"role": "assistant", "text": "Nice to meet you, Ada."},
    ]
    d = GeminiDialect(history=history)
    out = d.decode(json.dumps({"setupComplete": {}}), 7)
    assert [e.kind for e in out] == ["setup_complete", "history.sent"]
    (msg,) = [json.loads(m) for m in d.take_outgoing()]
    assert msg == {
        "clientContent": {
            "turns": [
                {"role": "user", "parts": [{"text": "My name is Ada."}]},
                {"role": "model", "parts": [{"text": "Nice to meet you, Ada."}]},
            ],
            "turnComplete": False,
        }
    }
    async with FakeGeminiServer(reply_s=0.5) as srv:
        rs = await run_rollouts(
            str(tmp_path), [("h", srv.url, "gemini", {"history": history}, tone_plan(16_000))]
        )
    r = rs["h"]
    assert r.metrics["status"] == "ok", r.metrics
    (conn,) = srv.conns
    assert len(conn.client_content) == 1 and not conn.audio_before_content
    assert r.find("history.sent") and r.metrics["downlink"]["audio_s"] == pytest.approx(
        0.5, abs=0.01
    )
