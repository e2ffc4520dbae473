"""Hostile input to every decoder: only the documented error escapes (issue #15 rows 5-7).

Deep nesting, integers over 4300 digits, NaN/Infinity/1e400, absurd sample rates and
timestamps: each decoder either returns clean items or raises its own error type
(`ProtocolError` for a peer, `ScenarioError` for a file), never RecursionError, ValueError or
OverflowError, and never an item the writer or the clock fit would choke on.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from rig import safejson
from rig.core.events import DownAudio, DownEvent
from rig.core.records import ChunkRecord
from rig.dialects import protowire as pw
from rig.dialects._wire import load_object
from rig.dialects.gemini import GeminiDialect
from rig.dialects.grok import GrokDialect
from rig.dialects.moshi import MoshiDialect
from rig.dialects.openai import OpenAIDialect
from rig.dialects.pipecat import PipecatDialect, message_frame
from rig.dialects.rawpcm import RawPcmDialect
from rig.errors import ProtocolError, ScenarioError
from rig.protocol import rawpcm
from rig.proxy import message_meta
from rig.recordings.jsonwrite import _json_line
from rig.scenarios.fileformat import parse_file
from rig.telemetry import wire
from rig.telemetry.deviceclock import DeviceClockCollector

DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
HUGE_INT = "9" * 5000
BAD_JSON_TEXTS = [
    DEEP_ARRAY,
    DEEP_OBJECT,
    '{"type":"x","n":' + HUGE_INT + "}",
    '{"type":"x","n":NaN}',
    '{"type":"x","n":Infinity}',
    '{"type":"x","n":-Infinity}',
    '{"type":"x","n":1e400}',
    '{"type":"x","n":[' + "[" * 70 + "]" * 70 + "]}",
]


def _finite_json(items: list[object]) -> None:
    """Whatever a decoder returns must serialise strictly (what the writer does)."""
    for it in items:
        if isinstance(it, DownAudio):
            rec = ChunkRecord(
                "down", 0, int(it.pcm.size), it.sample_rate, it.t_ns, server_ts_ms=it.server_ts_ms
            )
            json.dumps(rec.to_json(), allow_nan=False)
        elif isinstance(it, DownEvent):
            json.dumps({"data": it.data, "ts": it.server_ts_ms}, allow_nan=False)


@pytest.mark.parametrize("text", BAD_JSON_TEXTS, ids=range(len(BAD_JSON_TEXTS)))
def test_safejson_refuses(text: str) -> None:
    with pytest.raises(safejson.JsonInputError):
        safejson.parse(text)
    with pytest.raises(ProtocolError):
        safejson.loads_remote(text.encode())


def test_safejson_accepts_ordinary_json() -> None:
    obj = safejson.parse('{"a":[1,2.5,-3e10,"x",null,true],"b":{"c":18446744073709551615}}')
    assert obj == {"a": [1, 2.5, -3e10, "x", None, True], "b": {"c": 2**64 - 1}}
    assert safejson.parse(b"\xef\xbb\xbf[1]") == [1]  # a UTF-8 BOM
    nested = "[" * 64 + "]" * 64
    assert safejson.parse(nested) is not None
    with pytest.raises(safejson.JsonInputError):
        safejson.parse(b"\xff\xfe")


@pytest.mark.parametrize("text", BAD_JSON_TEXTS, ids=range(len(BAD_JSON_TEXTS)))
def test_json_decoders_raise_only_protocol_error(text: str) -> None:
    decoders = [
        lambda: rawpcm.decode_text(text),
        lambda: RawPcmDialect().decode(text, 0),
        lambda: load_object(text),
        lambda: OpenAIDialect().decode(text, 0),
        lambda: GrokDialect().decode(text, 0),
        lambda: GeminiDialect().decode(text, 0),
        lambda: GeminiDialect().decode(text.encode(), 0),
        lambda: PipecatDialect().decode(pw.field_bytes(4, pw.field_str(1, text), always=True), 0),
        lambda: wire.decode(text.encode()),
        lambda: DeviceClockCollector("r", "d").on_message(
            "rig/r/device/d/probe_reply", text.encode(), 0
        ),
    ]
    for i, decode in enumerate(decoders):
        with pytest.raises(ProtocolError):
            decode()
            pytest.fail(f"decoder {i} accepted {text[:40]!r}")


@pytest.mark.parametrize("text", BAD_JSON_TEXTS, ids=range(len(BAD_JSON_TEXTS)))
def test_proxy_meta_never_raises(text: str) -> None:
    meta = message_meta(text)
    assert meta["kind"] == "text" and "type" not in meta


@pytest.mark.parametrize("text", BAD_JSON_TEXTS[:3], ids=range(3))
def test_scenario_files_refuse_with_scenario_error(tmp_path, text: str) -> None:
    p = tmp_path / "s.json"
    p.write_text(text)
    with pytest.raises(ScenarioError, match="s.json"):
        parse_file(str(p))


def test_deep_toml_scenario_is_a_scenario_error(tmp_path) -> None:
    p = tmp_path / "s.toml"
    p.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ScenarioError, match="s.toml"):
        parse_file(str(p))


# -- numbers out of range -----------------------------------------------------------------------


def _ready(d: RawPcmDialect, rate: object) -> None:
    d.decode(json.dumps({"type": "ready", "sample_rate": rate}), 0)


@pytest.mark.parametrize("rate", [20_000_000, 0, True, 4e9, 4_000_000_000, -16000, 7_999, "16000"])
def test_rig_ready_rate_out_of_range_is_refused(rate: object) -> None:
    with pytest.raises(ProtocolError, match="sample rate"):
        _ready(RawPcmDialect(), rate)


def test_rig_ready_rate_in_range_is_kept() -> None:
    d = RawPcmDialect()
    _ready(d, 48_000)
    assert d.downlink_rate == 48_000 and d.ready


@pytest.mark.parametrize("ts", [math.inf, -math.inf, 1e300])
def test_rig_audio_frame_timestamp_out_of_range(ts: float) -> None:
    d = RawPcmDialect()
    _ready(d, 16_000)
    frame = struct.pack("<4sId", b"RPCM", 0, ts) + b"\x01\x00" * 4
    with pytest.raises(ProtocolError, match="timestamp"):
        d.decode(frame, 0)


def test_rig_audio_frame_nan_timestamp_means_unknown() -> None:
    d = RawPcmDialect()
    _ready(d, 16_000)
    (item,) = d.decode(struct.pack("<4sId", b"RPCM", 0, math.nan) + b"\x01\x00", 0)
    assert isinstance(item, DownAudio) and item.server_ts_ms is None


@pytest.mark.parametrize(
    "msg",
    [
        {"type": "speech_started", "server_ts_ms": 1e300},
        {"type": "probe_reply", "id": 0, "t0_ns": 1, "t1_server_ns": 1e300, "t2_server_ns": 2},
        {"type": "probe_reply", "id": 0, "t0_ns": 1, "t1_server_ns": 1, "t2_server_ns": 2**70},
        {"type": "probe_reply", "id": 0, "t0_ns": 1, "t1_server_ns": True, "t2_server_ns": 2},
    ],
)
def test_rig_event_numbers_out_of_range(msg: dict[str, object]) -> None:
    with pytest.raises(ProtocolError):
        RawPcmDialect().decode(json.dumps(msg), 0)


def test_rig_error_message_text_is_kept_verbatim() -> None:
    with pytest.raises(ProtocolError, match=r"\[/\]"):
        RawPcmDialect().decode(json.dumps({"type": "error", "message": "[/]"}), 0)


def _pipecat_audio(rate: int, channels: int = 1, audio: bytes = b"\x01\x00") -> bytes:
    body = pw.field_bytes(3, audio) + pw.field_varint(4, rate) + pw.field_varint(5, channels)
    return pw.field_bytes(2, body, always=True)


@pytest.mark.parametrize("rate", [20_000_000, 2**63, 1])
def test_pipecat_rate_out_of_range(rate: int) -> None:
    with pytest.raises(ProtocolError, match="sample rate"):
        PipecatDialect().decode(_pipecat_audio(rate), 0)


def test_pipecat_channels_out_of_range() -> None:
    with pytest.raises(ProtocolError, match="channels"):
        PipecatDialect().decode(_pipecat_audio(16_000, 2**40, b""), 0)


def test_pipecat_message_json_limits() -> None:
    d = PipecatDialect()
    (ev,) = d.decode(message_frame({"label": "x", "n": 1}), 0)
    assert ev.kind == "message"


def _gemini_audio(mime: str) -> str:
    pcm = np.zeros(2, dtype=np.int16).tobytes()
    import base64

    part = {"inlineData": {"mimeType": mime, "data": base64.b64encode(pcm).decode()}}
    return json.dumps({"serverContent": {"modelTurn": {"parts": [part]}}})


@pytest.mark.parametrize("mime", ["audio/pcm;rate=20000000", "audio/pcm;rate=0"])
def test_gemini_rate_out_of_range(mime: str) -> None:
    with pytest.raises(ProtocolError, match="sample rate"):
        GeminiDialect().decode(_gemini_audio(mime), 0)


def test_gemini_rate_in_range() -> None:
    (a,) = GeminiDialect().decode(_gemini_audio("audio/pcm;rate=24000"), 0)
    assert isinstance(a, DownAudio) and a.sample_rate == 24_000


def test_openai_huge_audio_position_is_a_protocol_error_not_overflow() -> None:
    d = OpenAIDialect()
    msg = '{"type":"input_audio_buffer.speech_started","audio_start_ms":1e400}'
    with pytest.raises(ProtocolError):
        d.decode(msg, 0)
    # large but finite (1e308 * 24000 overflows a float): no send time, still recorded
    for ms in ("1e300", "1e308", "-1e308"):
        msg = '{"type":"input_audio_buffer.speech_started","audio_start_ms":' + ms + "}"
        (ev,) = d.decode(msg, 0)
        assert ev.data["audio_start_uplink_t_ns"] is None
        _finite_json([ev])


def test_grok_ping_timestamp_out_of_range_is_null_with_reason() -> None:
    (ev,) = GrokDialect().decode('{"type":"ping","timestamp":1e300}', 0)
    assert ev.server_ts_ms is None
    assert "timestamp" in ev.data["server_ts_invalid"]
    (ok,) = GrokDialect().decode('{"type":"ping","timestamp":1700000000000}', 0)
    assert ok.server_ts_ms == 1.7e12


def test_moshi_garbage_raises_protocol_error_only() -> None:
    d = MoshiDialect()
    for bad in (b"", "text", b"\x09", b"\x01OggS" + b"\xff" * 40, b"\x02\xff\xfe"):
        with pytest.raises(ProtocolError):
            d.decode(bad, 0)


def test_device_clock_numbers_out_of_range() -> None:
    c = DeviceClockCollector("r", "d")
    pid, _ = c.make_probe(5)
    bad = {"v": 1, "id": pid, "t0_ns": 5, "t1_ns": 10**30, "t2_ns": 7}
    with pytest.raises(ProtocolError):
        c.on_message("rig/r/device/d/probe_reply", json.dumps(bad).encode(), 9)


# -- the writer never loses a row ---------------------------------------------------------------


def test_writer_line_keeps_a_row_with_non_finite_numbers() -> None:
    rec = ChunkRecord("down", 3, 2, 16_000, 10, server_ts_ms=math.inf, level_dbfs=math.nan)
    row = json.loads(_json_line(rec.to_json()))
    assert row["seq"] == 3 and row["server_ts_ms"] is None and row["level_dbfs"] is None
    assert set(row["invalid"]) == {"server_ts_ms", "level_dbfs"}
