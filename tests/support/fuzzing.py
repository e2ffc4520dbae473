"""Fuzz targets shared by the suite (tests/test_fuzz.py, hypothesis) and bench/fuzz.py.

Each target is a decoder or a file reader with the only exception types it may raise, a few
valid seed inputs, and a check of what it returns (numbers finite, rates in range, rows the
strict writer can serialise). Inputs are seeds mutated by a seeded `random.Random` (byte
flips, truncation, splices of hostile JSON tokens, duplication) or raw random bytes, so the
suite and the bench drive the same code the same way.
"""

from __future__ import annotations

import base64
import json
import math
import random
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.analysis.rollout import read_json, read_jsonl, read_track
from rig.core.events import DownAudio, DownEvent
from rig.core.records import ChunkRecord, EventRecord
from rig.dialects import protowire as pw
from rig.dialects.gemini import GeminiDialect
from rig.dialects.grok import GrokDialect
from rig.dialects.moshi import MoshiDialect
from rig.dialects.openai import OpenAIDialect
from rig.dialects.pipecat import PipecatDialect, audio_frame, message_frame
from rig.dialects.rawpcm import RawPcmDialect
from rig.errors import AudioInputError, ConfigError, ProtocolError, ScenarioError
from rig.limits import MAX_RATE_HZ, MIN_RATE_HZ
from rig.protocol import rawpcm
from rig.proxy import message_meta
from rig.recordings.jsonwrite import _json_line
from rig.recordings.wav import read_wav
from rig.reporting.summary import load_rollouts
from rig.safejson import JsonInputError, parse
from rig.scenarios.fileformat import build_items, parse_file
from rig.telemetry import events as tev
from rig.telemetry.deviceclock import DeviceClockCollector
from rig.telemetry.wire import decode as mqtt_decode
from rig.telemetry.wire import encode as mqtt_encode

Data = str | bytes

HOSTILE_TOKENS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "9" * 5000,
    "[" * 3000,
    "{" * 3000,
    '"\\ud800"',
    "true",
    "null",
    "4000000000",
    "0",
    "-1",
    '"[/]"',
    "1e308",
    "[]",
    "{}",
    '"' + "x" * 5000 + '"',
]


# -- checks on what a decoder returns ----------------------------------------------------------


def check_items(items: Any) -> None:
    """Decoded items must be usable: finite stored numbers, sane rates, writable rows."""
    assert isinstance(items, list), type(items)
    for it in items:
        assert isinstance(it, DownAudio | DownEvent), type(it)
        if isinstance(it, DownAudio):
            assert MIN_RATE_HZ <= it.sample_rate <= MAX_RATE_HZ, it.sample_rate
            assert it.pcm.dtype == np.int16 and it.pcm.ndim == 1
            rec = ChunkRecord(
                "down",
                0,
                int(it.pcm.size),
                it.sample_rate,
                it.t_ns,
                server_ts_ms=it.server_ts_ms,
                extra=it.extra,
            )
            row = json.loads(_json_line(rec.to_json()))
            assert "invalid" not in row, row["invalid"]
        else:
            if it.server_ts_ms is not None:
                assert math.isfinite(it.server_ts_ms)
            row = json.loads(_json_line(EventRecord(it.kind, it.t_ns, it.data).to_json()))
            assert "invalid" not in row, row["invalid"]


# -- mutation ----------------------------------------------------------------------------------


def mutate(rng: random.Random, seed: Data) -> Data:
    """One to four random edits of `seed` (text stays text, bytes stay bytes)."""
    is_text = isinstance(seed, str)
    buf = bytearray(seed.encode("utf-8") if isinstance(seed, str) else seed)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a byte
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del buf[pos:]
        elif op == 2:  # splice a hostile JSON token
            buf[pos:pos] = rng.choice(HOSTILE_TOKENS).encode()
        elif op == 3 and buf:  # replace a run with a hostile token (hits values)
            end = min(len(buf), pos + rng.randint(1, 12))
            buf[pos:end] = rng.choice(HOSTILE_TOKENS).encode()
        elif op == 4:  # random bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 5 and buf:  # duplicate a slice
            a = rng.randrange(len(buf))
            buf[pos:pos] = buf[a : a + rng.randint(1, 64)]
        elif op == 6 and len(buf) > 4:  # overwrite a 4-byte field (binary headers)
            i = rng.randrange(len(buf) - 3)
            buf[i : i + 4] = struct.pack("<I", rng.choice([0, 1, 2**31, 2**32 - 1, 20_000_000]))
    if is_text:
        return buf.decode("utf-8", "replace")
    return bytes(buf)


def random_input(rng: random.Random, seeds: list[Data]) -> Data:
    """Mostly mutated seeds, sometimes raw random bytes or text."""
    r = rng.random()
    if r < 0.1:
        return rng.randbytes(rng.randint(0, 256))
    if r < 0.15:
        return rng.randbytes(rng.randint(0, 64)).decode("latin-1")
    return mutate(rng, rng.choice(seeds))


# -- targets -----------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    run: Callable[[Data], Any]
    allowed: tuple[type[BaseException], ...]
    seeds: list[Data] = field(default_factory=list)


def _b64(n: int = 8) -> str:
    return base64.b64encode(np.arange(n, dtype="<i2").tobytes()).decode()


def _fresh_rig() -> RawPcmDialect:
    d = RawPcmDialect()
    d.decode(json.dumps({"type": "ready", "sample_rate": 16_000}), 0)
    return d


def _dialect_target(name: str, make: Callable[[], Any], seeds: list[Data]) -> Target:
    def run(data: Data) -> Any:
        out = make().decode(data, 1_000)
        check_items(out)
        return out

    return Target(name, run, (ProtocolError,), seeds)


def _rig_seeds() -> list[Data]:
    pcm = np.arange(16, dtype=np.int16)
    return [
        rawpcm.encode_text("ready", version=1, sample_rate=16_000, server_ts_ms=12.5),
        rawpcm.encode_text("speech_started", server_ts_ms=1000.0, audio_start_ms=5),
        rawpcm.encode_text("probe_reply", id=1, t0_ns=5, t1_server_ns=7, t2_server_ns=9),
        rawpcm.encode_text("error", message="[/] bad"),
        rawpcm.encode_audio(pcm, 3, 1234.5),
        rawpcm.encode_audio(pcm, 4, None),
    ]


def _openai_seeds() -> list[Data]:
    return [
        json.dumps({"type": "session.updated", "session": {}}),
        json.dumps({"type": "response.output_audio.delta", "item_id": "i", "delta": _b64()}),
        json.dumps({"type": "response.audio.delta", "item_id": "i", "delta": _b64()}),
        json.dumps({"type": "input_audio_buffer.speech_started", "audio_start_ms": 120}),
        json.dumps({"type": "error", "error": {"type": "x", "message": "y"}}),
        json.dumps({"type": "ping", "timestamp": 1_700_000_000_000}),
    ]


def _gemini_seeds() -> list[Data]:
    part = {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": _b64()}}
    return [
        json.dumps({"setupComplete": {}}),
        json.dumps({"serverContent": {"modelTurn": {"parts": [part, {"text": "hi"}]}}}),
        json.dumps({"serverContent": {"turnComplete": True, "interrupted": True}}),
        json.dumps({"serverContent": {"outputTranscription": {"text": "x"}}}),
        json.dumps({"usageMetadata": {"totalTokenCount": 5}}).encode(),
    ]


def _pipecat_seeds() -> list[Data]:
    return [
        audio_frame(np.arange(8, dtype=np.int16), 16_000),
        message_frame({"label": "rtvi-ai", "type": "bot-ready", "data": {}}),
        message_frame({"label": "rtvi-ai", "type": "user-started-speaking"}),
        pw.field_bytes(1, pw.field_str(3, "hello"), always=True),
        pw.field_bytes(5, b"", always=True),
    ]


def _moshi_seeds() -> list[Data]:
    seeds: list[Data] = [b"\x00", b"\x02 hello", b"\x03ab", b"\x05oops", b"\x06"]
    try:
        enc = MoshiDialect()
        enc.decode(b"\x00", 0)
        for k in range(2):
            seeds += enc.encode_audio(np.zeros(1920, dtype=np.int16), k, 0, 0)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - no libopus: the non-audio seeds still run
        pass
    return seeds


def _mqtt_seeds() -> list[Data]:
    evs = [
        tev.status("r", "x", 1, "done", status="ok", target="ws://h/"),
        tev.chunk("r", "x", 2, "up", 3, 320, lateness_ns=1000, level_dbfs=-20.5),
        tev.response("r", "x", 6, 700.0, model_ms=500.0),
        tev.clock("r", "x", 5, offset_ms=1.5, rtt_ms=3.0),
    ]
    batch = {
        "v": 1,
        "kind": "chunk_batch",
        "run": "r",
        "rollout": "x",
        "t_ns": 4,
        "data": {"dir": "up", "n_chunks": 2, "lateness_ns": [1, 2], "level_dbfs": -3.0},
    }
    return [mqtt_encode(e) for e in evs] + [json.dumps(batch).encode()]


def _mqtt_run(data: Data) -> Any:
    ev = mqtt_decode(data)
    from rig.telemetry import Reducer

    r = Reducer()
    r.apply(ev)  # what the dashboard pump does with it: must not raise
    r.snapshot(ev.t_ns)
    return ev


def _device_run(data: Data) -> Any:
    c = DeviceClockCollector("r", "d")
    pid, _ = c.make_probe(5)
    topic = "rig/r/device/d/probe_reply" if pid % 2 == 0 else "rig/r/device/d/events"
    raw = data.encode() if isinstance(data, str) else data
    out = c.on_message(topic, raw, 9)
    c.on_message("rig/r/device/d/events", raw, 9) if out is None else None
    return out


def _proxy_run(data: Data) -> Any:
    meta = message_meta(data)
    json.dumps(meta, allow_nan=False)
    return meta


def _safejson_run(data: Data) -> Any:
    obj = parse(data)
    json.dumps(obj, allow_nan=False)  # whatever parses, serialises strictly
    return obj


class _Files:
    """One scratch directory for the file-reader targets."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rig-fuzz-"))

    def write(self, name: str, data: Data) -> Path:
        p = self.dir / name
        p.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        return p


def _wav_seed(channels: int = 1, rate: int = 16_000) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
    data = np.arange(64, dtype="<i2").tobytes()
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data"
    body += struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def file_targets(files: _Files | None = None) -> list[Target]:
    f = files or _Files()

    def track(data: Data) -> Any:
        x, rate = read_track(f.write("t.wav", data))
        assert rate > 0 and x.ndim == 1
        return x

    def wav(data: Data) -> Any:
        pcm, rate = read_wav(str(f.write("w.wav", data)))
        assert rate > 0
        return pcm

    def jsonl(data: Data) -> Any:
        rows = read_jsonl(f.write("e.jsonl", data))
        assert all(isinstance(r, dict) for r in rows)
        return rows

    def metrics(data: Data) -> Any:
        d = f.dir / "run" / "rollouts" / "r"
        d.mkdir(parents=True, exist_ok=True)
        (d / "metrics.json").write_bytes(data.encode() if isinstance(data, str) else data)
        read_json(d / "metrics.json")
        from rig.reporting.summary import summary_table

        rows = load_rollouts(str(f.dir / "run"))
        summary_table(rows)
        return rows

    def scenario(data: Data) -> Any:
        p = f.write("s.json", data)
        return build_items(parse_file(str(p)), str(p), 16_000)

    def scenario_toml(data: Data) -> Any:
        p = f.write("s.toml", data)
        return build_items(parse_file(str(p)), str(p), 16_000)

    metrics_seed = json.dumps(
        {
            "status": "ok",
            "responses": [{"latency_ms": 1.5}],
            "uplink": {"lateness_ms": {"p50": 0.1}, "stalls": 0},
        }
    )
    scen = {
        "suite": {"name": "s"},
        "items": [
            {
                "id": "a",
                "steps": [
                    {"type": "pause", "seconds": 0.1},
                    {"type": "drain", "quiet_s": 0.1, "max_s": 1},
                ],
            }
        ],
    }
    toml = '[suite]\nname = "s"\n[[items]]\nid = "a"\nsteps = [{ type = "pause", seconds = 0.1 }]\n'
    reader_errors = (AudioInputError,)
    return [
        Target("file:read_track", track, reader_errors, [_wav_seed(), _wav_seed(2, 48_000)]),
        Target("file:read_wav", wav, reader_errors, [_wav_seed()]),
        Target("file:read_jsonl", jsonl, (), ['{"kind":"a","t_ns":1}\n{"kind":"b"}\n{torn']),
        Target("file:metrics", metrics, (), [metrics_seed, "[]"]),
        Target(
            "file:scenario_json",
            scenario,
            (ScenarioError, ConfigError, AudioInputError),
            [json.dumps(scen)],
        ),
        Target(
            "file:scenario_toml",
            scenario_toml,
            (ScenarioError, ConfigError, AudioInputError),
            [toml],
        ),
    ]


def decoder_targets() -> list[Target]:
    rig_seeds = _rig_seeds()
    return [
        Target("safejson", _safejson_run, (JsonInputError,), rig_seeds[:4] + _openai_seeds()),
        Target(
            "rig:decode_text",
            lambda d: rawpcm.decode_text(d if isinstance(d, str) else d.decode("utf-8", "replace")),
            (ProtocolError,),
            rig_seeds[:4],
        ),
        Target(
            "rig:decode_audio",
            lambda d: rawpcm.decode_audio(d if isinstance(d, bytes) else d.encode()),
            (ProtocolError,),
            rig_seeds[4:],
        ),
        _dialect_target("dialect:rig", _fresh_rig, rig_seeds),
        _dialect_target("dialect:openai", OpenAIDialect, _openai_seeds()),
        _dialect_target("dialect:grok", GrokDialect, _openai_seeds()),
        _dialect_target("dialect:gemini", GeminiDialect, _gemini_seeds()),
        _dialect_target("dialect:pipecat", PipecatDialect, _pipecat_seeds()),
        _dialect_target("dialect:moshi", _moshi_ready, _moshi_seeds()),
        Target("mqtt:decode", _mqtt_run, (ProtocolError,), _mqtt_seeds()),
        Target(
            "deviceclock",
            _device_run,
            (ProtocolError,),
            [
                json.dumps({"v": 1, "id": 0, "t0_ns": 5, "t1_ns": 7, "t2_ns": 8}),
                json.dumps({"v": 1, "t_ns": 99, "name": "beep"}),
            ],
        ),
        Target("proxy:message_meta", _proxy_run, (), rig_seeds + _openai_seeds()),
    ]


def message_frame_raw(text: str) -> bytes:
    """A pipecat MessageFrame carrying `text` verbatim (JSON or not)."""
    return pw.field_bytes(4, pw.field_str(1, text), always=True)


def _moshi_ready() -> MoshiDialect:
    d = MoshiDialect()
    d.decode(b"\x00", 0)
    return d


def webrtc_targets(files: _Files | None = None) -> list[Target]:
    """WebRTC signalling (data-channel messages, pipecat's JSON answer), the sim's WebRTC
    offer reader, and the device calibration readers (a file, the store)."""
    from rig.device.calibration import load_calibration
    from rig.device.calibration_store import FORMAT_VERSION, CalibrationStore, PathKey
    from rig.sim.webrtc_server import offer_sdp
    from rig.transports.webrtc.signalling import _json_events, pipecat_answer

    f = files or _Files()
    key = PathKey("alsa", "ALSA", "in", "out", 48_000, 256, "low", True)
    result = {"round_trip_ms": 12.5, "spread_ms": 0.2, **key.as_dict()}
    store = CalibrationStore(f.dir / "store")

    def datachannel(data: Data) -> Any:
        items = _json_events("events", data, 1)
        check_items(items)
        return items

    def calibration_file(data: Data) -> Any:
        cal = load_calibration(str(f.write("cal.json", data)), key)
        assert cal is None or math.isfinite(cal.round_trip_ms)
        return cal

    def calibration_store(data: Data) -> Any:
        store.root.mkdir(exist_ok=True)
        path = store.path_for(key)
        path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        cal = load_calibration("auto", key, store.root)
        assert cal is None or math.isfinite(cal.round_trip_ms)
        return cal

    def answer(data: Data) -> Any:
        sdp, pc_id = pipecat_answer(
            data.encode("utf-8", "replace") if isinstance(data, str) else data
        )
        assert isinstance(sdp, str) and (pc_id is None or isinstance(pc_id, str))
        return sdp

    def offer(data: Data) -> Any:
        return offer_sdp(data.encode("utf-8", "replace") if isinstance(data, str) else data)

    sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\n"
    rtvi = {"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "1.0.0"}}
    stored = {
        "format": FORMAT_VERSION,
        "key": key.as_dict(),
        "measured_at": "x",
        "calibration": result,
    }
    return [
        Target("webrtc:datachannel", datachannel, (), [json.dumps(rtvi), "plain text", "[1,2]"]),
        Target(
            "webrtc:pipecat_answer",
            answer,
            (ProtocolError,),
            [json.dumps({"sdp": sdp, "type": "answer", "pc_id": "p1"})],
        ),
        Target(
            "sim:webrtc_offer", offer, (ValueError,), [json.dumps({"sdp": sdp, "type": "offer"})]
        ),
        Target(
            "file:calibration",
            calibration_file,
            (ConfigError,),
            [json.dumps({"calibration": result}), json.dumps(result)],
        ),
        Target("file:calibration_store", calibration_store, (ConfigError,), [json.dumps(stored)]),
    ]


def all_targets() -> list[Target]:
    return decoder_targets() + file_targets() + webrtc_targets()


def run_one(target: Target, data: Data) -> str | None:
    """Run one input: None if it passed (or raised an allowed error), else the bad type."""
    try:
        target.run(data)
    except target.allowed:
        return None
    except Exception as exc:  # noqa: BLE001 - the point: report any other type
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


__all__ = [
    "Target",
    "all_targets",
    "decoder_targets",
    "file_targets",
    "message_frame_raw",
    "mutate",
    "random_input",
    "run_one",
]
