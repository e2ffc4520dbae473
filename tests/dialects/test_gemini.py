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
    for bad in ("nope", '{"serverContent": 3}', '{"error": {"code": 3}}'):
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


def _pcm_b64(pcm: np.ndarray, *, urlsafe: bool = False, pad: bool = True) -> str:
    import base64

    raw = pcm.astype("<i2").tobytes()
    text = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    return text if pad else text.rstrip("=")


# bytes whose base64 has '-' and '_' in the URL-safe alphabet (and '+', '/' in the standard)
_PCM = np.frombuffer(bytes([0xFB, 0xFF, 0xBF, 0xFE, 0xFF, 0xEF] * 40), "<i2").copy()


@pytest.mark.parametrize("urlsafe", [False, True])
@pytest.mark.parametrize("pad", [True, False])
def test_server_audio_in_either_spelling_and_alphabet(urlsafe: bool, pad: bool) -> None:
    """As protobuf's JSON parser reads it: snake_case or camelCase, URL-safe base64 too."""
    data = _pcm_b64(_PCM, urlsafe=urlsafe, pad=pad)
    assert ("-" in data or "_" in data) == urlsafe
    for msg in (
        {"serverContent": {"modelTurn": {"parts": [{"inlineData": {
            "mimeType": "audio/pcm;rate=24000", "data": data}}]}, "turnComplete": True}},
        {"server_content": {"model_turn": {"parts": [{"inline_data": {
            "mime_type": "audio/pcm;rate=24000", "data": data}}]}, "turn_complete": True}},
    ):  # fmt: skip
        audio, done = GeminiDialect().decode(json.dumps(msg), 7)
        assert np.array_equal(audio.pcm, _PCM) and audio.sample_rate == 24_000
        assert done.kind == "turn_complete"
    (ev,) = GeminiDialect().decode('{"setup_complete": {}}', 1)
    assert ev.kind == "setup_complete"


def test_unknown_server_fields_are_events_not_errors() -> None:
    d = GeminiDialect()
    (ev,) = d.decode('{"mystery": 1}', 4)
    assert ev.kind == "unknown" and ev.data["fields"] == ["mystery"]
    assert ev.data["values"] == {"mystery": 1}
    got = d.decode('{"serverContent": {"turnComplete": true, "turnCompleteReason": "X"}}', 5)
    assert [e.kind for e in got] == ["turn_complete", "server_content"]
    assert got[1].data == {"fields": ["turnCompleteReason"]}


_STARTED, _STOPPED = "speech_started", "speech_stopped"


def test_voice_activity_maps_to_speech_started_and_stopped() -> None:
    """Both of LiveServerMessage's VAD fields, as the service sends them (voiceActivity's
    wire field is `type`; the SDK calls it voice_activity_type), enums by name or number."""
    d = GeminiDialect()
    d.encode_audio(np.zeros(16_000, np.int16), 0, 0, 1_000_000_000)  # 1 s sent at t=1 s
    start, stop = (
        d.decode(json.dumps({"voiceActivity": {"type": t, "audioOffset": off}}), 9)[0]
        for t, off in (("ACTIVITY_START", "0.250s"), (2, "0.5s"))
    )
    assert start.kind == "speech_started" and start.data["audio_start_ms"] == 250.0
    assert stop.kind == "speech_stopped" and stop.data["audio_end_ms"] == 500.0
    assert stop.data["audio_end_uplink_t_ns"] is not None
    for msg, kind in (
        ({"voiceActivityDetectionSignal": {"vadSignalType": "VAD_SIGNAL_TYPE_SOS"}}, _STARTED),
        ({"voice_activity_detection_signal": {"vad_signal_type": "vad_signal_type_eos"}}, _STOPPED),
        ({"voice_activity": {"voice_activity_type": "ACTIVITY_END"}}, "speech_stopped"),
        ({"voiceActivity": {"type": "TYPE_UNSPECIFIED"}}, "voice_activity"),
    ):  # fmt: skip
        (ev,) = GeminiDialect().decode(json.dumps(msg), 3)
        assert ev.kind == kind, msg


def test_field_names_are_the_sdks() -> None:
    """Every field the decoders read exists in google-genai's own types (their JSON names)."""
    types = pytest.importorskip("google.genai.types")
    from rig.dialects import gemini
    from rig.dialects.protojson import json_name

    def names(model: type) -> set[str]:
        return {json_name(f) for f in model.model_fields}

    server = names(types.LiveServerMessage)
    assert set(gemini._SERVER_FIELDS) - {"error"} <= server, set(gemini._SERVER_FIELDS) - server
    assert set(gemini._CONTENT_FIELDS) <= names(types.LiveServerContent)
    assert set(gemini._CLIENT_FIELDS) <= names(types.LiveClientMessage)
    assert set(gemini._CLIENT_MARKS) <= names(types.LiveClientRealtimeInput)
    assert {"audio", "mediaChunks"} <= names(types.LiveClientRealtimeInput)
    assert {"mimeType", "data"} <= names(types.Blob)
    assert "inlineData" in names(types.Part) and "modelTurn" in names(types.LiveServerContent)
    assert "vadSignalType" in names(types.VoiceActivityDetectionSignal)
    assert "audioOffset" in names(types.VoiceActivity)
