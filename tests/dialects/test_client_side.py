"""The client side of every dialect (`decode_client`, for the recording proxy): what the
rig's own client encoding sends decodes back to the same audio and the rig's event kinds;
garbage is a ProtocolError."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rig.core.events import UpAudio, UpEvent
from rig.dialects import get_dialect
from rig.dialects.pipecat import message_frame
from rig.errors import ProtocolError


def _speech(n: int, rate: int) -> np.ndarray:
    t = np.arange(n) / rate
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


@pytest.mark.parametrize("name", ["rig", "raw", "openai", "grok", "pipecat"])
def test_client_audio_decodes_to_what_the_client_encoded(name: str) -> None:
    client, proxy = get_dialect(name), get_dialect(name)
    for m in client.open_messages():
        proxy.decode_client(m, 1)
    rate = client.uplink_rate
    pcm = _speech(rate // 50, rate)
    items = []
    for seq in range(3):
        for m in client.encode_audio(pcm, seq, 0, 5):
            items += proxy.decode_client(m, 100 + seq)
    audio = [i for i in items if isinstance(i, UpAudio)]
    assert len(audio) == 3
    assert all(a.sample_rate == rate and np.array_equal(a.pcm, pcm) for a in audio)
    assert [a.t_ns for a in audio] == [100, 101, 102]


def test_rig_hello_sets_rate_and_framing_for_both_directions() -> None:
    proxy = get_dialect("rig")
    client = get_dialect("rig", sample_rate=24_000, framing="raw")
    (hello,) = client.open_messages()
    (ev,) = proxy.decode_client(hello, 7)
    assert ev == UpEvent("session", 7, {"sample_rate": 24_000, "framing": "raw"})
    assert proxy.uplink_rate == proxy.downlink_rate == 24_000
    (a,) = proxy.decode_client(b"\x01\x00\x02\x00", 8)  # bare PCM now
    assert isinstance(a, UpAudio) and a.pcm.tolist() == [1, 2]


def test_openai_client_truncate_cancel_commit_and_session_map_to_rig_kinds() -> None:
    d = get_dialect("openai")
    msgs = [
        {"type": "conversation.item.truncate", "item_id": "it1", "audio_end_ms": 640},
        {"type": "response.cancel"},
        {"type": "input_audio_buffer.commit"},
        {"type": "session.update", "session": {"api_key": "sk-secret", "voice": "x"}},
        {"type": "response.create"},
    ]
    out = [d.decode_client(json.dumps(m), 1)[0] for m in msgs]
    assert [e.kind for e in out] == ["truncate", "cancel", "turn_end", "session", "response.create"]
    assert out[0].data == {"item_id": "it1", "audio_end_ms": 640}
    assert "sk-secret" not in json.dumps(out[3].data)


def test_gemini_client_audio_at_its_mime_rate_and_activity_marks() -> None:
    client, proxy = get_dialect("gemini", activity="manual"), get_dialect("gemini")
    (setup,) = client.open_messages()
    assert proxy.decode_client(setup, 1)[0].kind == "session"
    pcm = _speech(1600, 16_000)
    (m,) = client.encode_audio(pcm, 0, 0, 0)
    (a,) = proxy.decode_client(m, 2)
    assert isinstance(a, UpAudio) and a.sample_rate == 16_000 and a.pcm.size == 1600
    kinds = [proxy.decode_client(x, 3)[0].kind for k in ("turn_start", "turn_end")
             for x in client.encode_event(k, {}, 0)]  # fmt: skip
    assert kinds == ["turn_start", "turn_end"]


def test_pipecat_client_rtvi_message_keeps_its_type() -> None:
    d = get_dialect("pipecat")
    (ev,) = d.decode_client(message_frame({"label": "rtvi-ai", "type": "client-ready"}), 4)
    assert ev.kind == "rtvi.client-ready"


def test_moshi_client_opus_decodes_to_audio_of_the_same_length() -> None:
    pytest.importorskip("av")
    client, proxy = get_dialect("moshi"), get_dialect("moshi")
    client.decode(b"\x00", 0)  # the server's handshake lets the client send
    pcm = _speech(1920, 24_000)
    got = []
    for seq in range(5):
        for m in client.encode_audio(pcm, seq, 0, 0):
            got += proxy.decode_client(m, seq)
    total = sum(a.pcm.size for a in got if isinstance(a, UpAudio))
    assert 3 * 1920 <= total <= 5 * 1920  # the decoder's lookahead holds back a little
    assert np.abs(np.concatenate([a.pcm for a in got])).max() > 2000  # speech, not silence


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("rig", b"XXXX" + b"\x00" * 20),  # bad magic
        ("rig", "not json"),
        ("openai", b"\x00binary"),
        ("openai", json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"})),
        ("openai", json.dumps({"no": "type"})),
        ("grok", "[1, 2]"),
        ("gemini", json.dumps({"realtimeInput": "nope"})),
        ("gemini", json.dumps({"unknown": 1})),
        ("pipecat", "text"),
        ("pipecat", b"\xff\xff\xff"),
        ("moshi", "text"),
        ("moshi", b"\x09abc"),
    ],
)
def test_garbage_from_a_client_is_a_protocol_error(name: str, message: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        get_dialect(name).decode_client(message, 0)


def test_gemini_client_as_the_google_genai_sdk_sends_it() -> None:
    """snake_case top-level names and blob fields, URL-safe base64 without padding."""
    import base64

    d = get_dialect("gemini")
    pcm = np.frombuffer(bytes([0xFB, 0xFF, 0xBF, 0xFE] * 80), "<i2").copy()
    data = base64.urlsafe_b64encode(pcm.astype("<i2").tobytes()).decode().rstrip("=")
    msg = {"realtime_input": {"audio": {"data": data, "mime_type": "audio/pcm;rate=16000"}}}
    (up,) = d.decode_client(json.dumps(msg), 5)
    assert up.sample_rate == 16_000 and np.array_equal(up.pcm, pcm)
    (ev,) = d.decode_client('{"realtime_input": {"activity_end": {}}}', 6)
    assert ev.kind == "turn_end"
    (ev,) = d.decode_client('{"realtime_input": {"audio_stream_end": true}}', 6)
    assert ev.kind == "end"
    (ev,) = d.decode_client('{"client_content": {"turns": [], "turn_complete": true}}', 7)
    assert ev.kind == "client_content"
    (ev,) = d.decode_client('{"tool_response": {"function_responses": []}}', 8)
    assert ev.kind == "tool_response"
    (ev,) = d.decode_client('{"realtime_input": {"text": "hi"}}', 9)
    assert ev.kind == "realtime_input"
