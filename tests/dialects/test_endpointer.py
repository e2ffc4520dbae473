"""The hosted endpointer knobs: OpenAI/Grok `threshold`, `prefix_padding_ms`,
`silence_duration_ms`; Gemini `automaticActivityDetection` and `activityHandling` in
`setup.realtimeInputConfig`; rig-pcm's `silence_duration_ms` in its hello. Each reaches the
wire under its documented name; a value out of range is a one-line ConfigError."""

import json

import pytest

from rig.dialects import get_dialect
from rig.errors import ConfigError


def _session(name: str, **opts: object) -> dict:
    (msg,) = get_dialect(name, **opts).open_messages()
    return json.loads(msg)


def test_openai_and_grok_server_vad_knobs() -> None:
    s = _session("openai", threshold=0.5, prefix_padding_ms=300, silence_duration_ms=500)
    td = s["session"]["audio"]["input"]["turn_detection"]
    assert td == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
    }
    beta = _session("openai", api="beta", threshold=0.7)["session"]["turn_detection"]
    assert beta == {"type": "server_vad", "threshold": 0.7}
    g = _session("grok", threshold=0.5, prefix_padding_ms=300)["session"]["turn_detection"]
    assert g == {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300}


def test_gemini_activity_detection_and_handling() -> None:
    s = _session(
        "gemini",
        silence_duration_ms=500,
        prefix_padding_ms=300,
        start_sensitivity="low",
        end_sensitivity="high",
        activity_handling="NO_INTERRUPTION",
    )["setup"]
    assert s["realtimeInputConfig"] == {
        "automaticActivityDetection": {
            "silenceDurationMs": 500,
            "prefixPaddingMs": 300,
            "startOfSpeechSensitivity": "START_SENSITIVITY_LOW",
            "endOfSpeechSensitivity": "END_SENSITIVITY_HIGH",
        },
        "activityHandling": "NO_INTERRUPTION",
    }
    assert "realtimeInputConfig" not in _session("gemini")["setup"]


def test_rig_pcm_asks_for_its_endpointer_silence_in_the_hello() -> None:
    assert _session("rig", silence_duration_ms=300)["endpoint_silence_ms"] == 300
    assert "endpoint_silence_ms" not in _session("rig")


@pytest.mark.parametrize(
    ("name", "opts", "message"),
    [
        ("openai", {"threshold": 1.5}, "threshold must be a number in [0, 1]"),
        ("grok", {"prefix_padding_ms": -1}, "prefix_padding_ms must be an integer of millis"),
        ("openai", {"silence_duration_ms": 1e9}, "silence_duration_ms must be an integer"),
        ("openai", {"eagerness": "eager"}, "eagerness must be one of low, medium, high, auto"),
        ("gemini", {"start_sensitivity": "max"}, "start_sensitivity must be 'high' or 'low'"),
        ("gemini", {"activity_handling": "barge"}, "activity_handling must be one of"),
        ("gemini", {"activity": "manual", "silence_duration_ms": 300}, "need activity='auto'"),
        ("rig", {"silence_duration_ms": "fast"}, "silence_duration_ms must be an integer"),
    ],
)
def test_bad_endpointer_values_are_one_line(name, opts, message) -> None:
    with pytest.raises(ConfigError) as exc:
        get_dialect(name, **opts)
    assert message in str(exc.value) and "\n" not in str(exc.value)
