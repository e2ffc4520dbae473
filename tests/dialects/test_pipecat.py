"""Pipecat dialect: protobuf frames by hand, RTVI client-ready, a fake bot, a real bot."""

import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from rig.dialects import protowire as pw
from rig.dialects.pipecat import PipecatDialect, audio_frame, message_frame
from rig.errors import ProtocolError
from tests.fakes.harness import run_rollouts, speech_plan, tone_plan
from tests.fakes.pipecat_server import FakePipecatServer
from tests.support.wait import until

HERE = os.path.dirname(os.path.dirname(__file__))  # tests/


def test_audio_frame_wire_bytes_by_hand() -> None:
    pcm = np.array([1, -2], dtype=np.int16)
    # Frame.audio (field 2, LEN) { audio (3, LEN) 4 bytes; sample_rate (4) 16000; channels (5) 1 }
    inner = b"\x1a\x04\x01\x00\xfe\xff" + b"\x20\x80\x7d" + b"\x28\x01"
    assert audio_frame(pcm, 16_000) == b"\x12" + bytes([len(inner)]) + inner
    assert pw.parse(b"\x08\x96\x01") == {1: [150]}
    with pytest.raises(ProtocolError):
        pw.parse(b"\x12\x40\x1a")


def test_client_ready_and_decoding() -> None:
    d = PipecatDialect(wait_bot_ready=True)
    (hello,) = d.open_messages()
    msg = json.loads(pw.last_str(pw.parse(pw.parse(hello)[4][0]), 1))
    assert msg["label"] == "rtvi-ai" and msg["type"] == "client-ready"
    assert not d.ready
    (ev,) = d.decode(message_frame({"label": "rtvi-ai", "type": "bot-ready", "data": {}}), 1)
    assert d.ready and ev.kind == "rtvi.bot-ready"
    pts = pw.field_bytes(
        2,
        pw.field_bytes(3, b"\x05\x00")
        + pw.field_varint(4, 24_000)
        + pw.field_varint(5, 1)
        + pw.field_varint(6, 2_500_000),
        always=True,
    )
    (audio,) = d.decode(pts, 2)
    assert audio.sample_rate == 24_000 and audio.pcm.tolist() == [5]
    assert audio.server_ts_ms == 2.5  # pts is pipeline nanoseconds
    for bad in ("text", b"", b"\x12\x40\x1a", pw.field_bytes(4, pw.field_str(1, "{"), always=True)):
        with pytest.raises(ProtocolError):
            d.decode(bad, 0)


@pytest.mark.realtime
async def test_pipecat_fake_rollouts_and_faults(tmp_path) -> None:
    async with FakePipecatServer(stop_secs=0.3, reply_s=0.6) as srv:
        rs = await run_rollouts(
            str(tmp_path),
            [
                ("ok", srv.url, "pipecat", {"wait_bot_ready": True}, tone_plan(16_000)),
                ("dead", srv.url + "/?fault=disconnect&at_s=1.0", "pipecat", {}, tone_plan(16_000)),
                ("junk", srv.url + "/?fault=malformed&at_s=0.8", "pipecat", {}, tone_plan(16_000)),
            ],
        )
    ok = rs["ok"]
    assert ok.metrics["status"] == "ok", ok.metrics
    assert ok.metrics["downlink"]["audio_s"] == pytest.approx(0.6, abs=0.01)
    assert ok.find("server.transcription")[0]["text"] == "what time is it"
    assert ok.find("server.rtvi.bot-ready")
    assert rs["dead"].metrics["status"] == "transport_error"
    assert rs["junk"].metrics["status"] == "protocol_error"
    assert all(c.rates == {16_000} for c in srv.conns if c.audio_frames)


# --- a real pipecat bot (pipecat-ai installed in some interpreter) -------------------------


def _pipecat_python() -> str | None:
    for cand in (os.environ.get("RIG_PIPECAT_PYTHON"), sys.executable, "/tmp/pcvenv/bin/python"):
        if cand and shutil.which(cand) or (cand and os.path.exists(cand)):
            ok = subprocess.run(
                [cand, "-c", "import pipecat.serializers.protobuf"], capture_output=True, timeout=60
            )
            if ok.returncode == 0:
                return cand
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pipecat_python() -> str:
    py = _pipecat_python()
    if py is None:
        pytest.skip(
            "pipecat-ai is not importable (set RIG_PIPECAT_PYTHON to an interpreter with "
            "pipecat-ai[silero,websocket])"
        )
    return py


@pytest.mark.pipecat
def test_serializer_matches_pipecats_own_frames_pb2(pipecat_python: str) -> None:
    blob = audio_frame(np.array([7, -7, 300], np.int16), 16_000).hex()
    code = (
        "import pipecat.frames.protobufs.frames_pb2 as p, sys\n"
        f"f = p.Frame.FromString(bytes.fromhex('{blob}'))\n"
        "print(f.WhichOneof('frame'), f.audio.sample_rate, f.audio.num_channels, "
        "f.audio.audio.hex())\n"
        "g = p.Frame(); g.transcription.text = 'hi'; g.transcription.user_id = 'u'\n"
        "print(g.SerializeToString().hex())\n"
    )
    out = subprocess.run(
        [pipecat_python, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split("\n")
    assert out[0] == "audio 16000 1 0700f9ff2c01"
    (ev,) = PipecatDialect().decode(bytes.fromhex(out[1]), 0)
    assert ev.kind == "transcription" and ev.data["text"] == "hi" and ev.data["user_id"] == "u"


@pytest.mark.pipecat
@pytest.mark.realtime
async def test_real_pipecat_bot_latency_follows_its_vad_stop_secs(tmp_path, pipecat_python):
    stop_secs, reply_s = 0.4, 0.8
    port = _free_port()
    bot = subprocess.Popen(  # noqa: ASYNC220 - started before the loop has work
        [
            pipecat_python,
            os.path.join(HERE, "fakes", "pipecat_bot.py"),
            str(port),
            str(stop_secs),
            str(reply_s),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "bot.log", "w"),  # noqa: SIM115, ASYNC230
    )
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        try:  # Silero + pipecat import take a few seconds
            await until(listening, timeout_s=60, every_s=0.2, what="the pipecat bot to listen")
        except AssertionError:
            pytest.fail("pipecat bot did not start: " + (tmp_path / "bot.log").read_text()[-2000:])
        rs = await run_rollouts(
            str(tmp_path),
            [
                (
                    "bot",
                    f"ws://127.0.0.1:{port}",
                    "pipecat",
                    {},
                    speech_plan(16_000, ("what",), gap_s=2.0),
                )
            ],
            drain_quiet_s=1.0,
        )
    finally:
        bot.terminate()
        bot.wait(10)
    m = rs["bot"].metrics
    assert m["status"] == "ok", m
    (resp,) = [r for r in m["responses"] if r.get("latency_ms") is not None]
    # the bot answers when Silero has heard stop_secs of silence: never earlier, and not
    # much later (VAD windows of 32 ms, output chunking, loopback)
    assert stop_secs * 1000 - 50 <= resp["latency_ms"] <= stop_secs * 1000 + 400, resp
    assert m["downlink"]["audio_s"] == pytest.approx(reply_s, abs=0.05)
    from rig.recordings.wav import read_wav

    pcm, rate = read_wav(os.path.join(rs["bot"].dir, "system.wav"))[:2]
    assert rate == 16_000 and np.abs(pcm).max() > 5000  # the reply is in the recording


WORDS = ("what", "weather")  # Silero hears speech, not a tone


async def _bot_rollout(tmp_path, python: str, stop_secs: float) -> tuple[dict, list[int]]:
    """One rollout at a real pipecat bot with RTVI VAD messages; (metrics, its vad_stop ns)."""
    port = _free_port()
    out_path = tmp_path / f"bot-{stop_secs}.out"
    bot = subprocess.Popen(  # noqa: ASYNC220 - started before the loop has work
        [python, os.path.join(HERE, "fakes", "pipecat_bot.py"), str(port), str(stop_secs),
         "0.4", "rtvi"],
        stdout=open(out_path, "w"),  # noqa: SIM115, ASYNC230
        stderr=open(tmp_path / f"bot-{stop_secs}.log", "w"),  # noqa: SIM115, ASYNC230
    )  # fmt: skip
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        await until(listening, timeout_s=60, every_s=0.2, what="the pipecat bot to listen")
        rs = await run_rollouts(
            str(tmp_path / f"s{stop_secs}"),
            [("bot", f"ws://127.0.0.1:{port}", "pipecat", {}, speech_plan(16_000, WORDS, 2.0))],
            drain_quiet_s=1.0,
        )
    finally:
        bot.terminate()
        bot.wait(10)
    stops = [
        int(line.split()[1]) for line in out_path.read_text().split("\n") if "vad_stop" in line
    ]
    return rs["bot"].metrics, stops


@pytest.mark.pipecat
@pytest.mark.realtime
async def test_real_pipecat_bot_detect_follows_stop_secs_and_its_own_log(tmp_path, pipecat_python):
    """RTVI `vad-user-stopped-speaking` as the decision: detect_ms tracks VADParams.stop_secs,
    and the decision time it implies matches the time the bot logged (shared monotonic clock;
    no round trip measured here, so `arrival`: the event's arrival, a loopback hop later)."""
    detect: dict[float, list[float]] = {}
    for stop_secs in (0.3, 0.8):
        m, stops = await _bot_rollout(tmp_path, pipecat_python, stop_secs)
        assert m["status"] == "ok", m
        rs = [r for r in m["responses"] if r.get("latency_ms") is not None]
        assert len(rs) == 2 == len(stops), (m["responses"], stops)
        for r, t_log in zip(rs, stops, strict=True):
            assert r["decision_source"] == "rtvi.vad-user-stopped-speaking", r
            assert r["generation_method"] == "arrivals"
            decided_ns = (
                r["user_end_ns"] + r["detect_ms"] * 1e6 + (r.get("detect_rtt_ms") or 0) * 5e5
            )
            # the message leaves the bot after its log line: a loopback hop and two event loops
            assert 0 <= (decided_ns - t_log) / 1e6 <= 15, (r, t_log)
            assert 0 <= r["generation_ms"] <= 60, r  # the tone is pushed right after the decision
        detect[stop_secs] = [r["detect_ms"] for r in rs]
    # per word (each has its own VAD tail): the wait grows by the stop_secs difference
    for long_ms, short_ms in zip(detect[0.8], detect[0.3], strict=True):
        assert 500 - 40 <= long_ms - short_ms <= 500 + 40, detect
