"""Against a real Pipecat SmallWebRTC bot (pipecat-ai in another interpreter) on loopback.

The bot (source below, written to a temp file) runs Silero VAD and answers each end of user
speech with a 0.8 s tone; it logs its VAD stop and reply times on the shared monotonic clock.
The rig plays a recorded question over `--dialect pipecat` signalling (JSON offer, `ping`
keep-alives) and must record the reply with a latency consistent with the bot's VAD stop.

The interpreter is `$RIG_PIPECAT_PYTHON`, else /tmp/pcvenv/bin/python, else this one; the test
skips when none of them imports pipecat's SmallWebRTC transport.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig.analysis.webrtc import decompose
from rig.core.plan import PlanBuilder
from rig.scenarios import data_path
from tests.support.wait import wait_for
from tests.support.webrtc import webrtc_rollout as _rollout

pytestmark = [pytest.mark.pipecat, pytest.mark.realtime]

BOT_SOURCE = r"""# A minimal Pipecat SmallWebRTC bot: Silero VAD, then a 0.8 s tone reply.
# python bot.py PORT LOG_PATH: POST /api/offer on 127.0.0.1 (aiohttp), ICE on 127.0.0.1 only;
# logs (JSON lines, shared monotonic clock) its VAD stop and when it pushed the reply.

import asyncio
import json
import sys
import time

import aioice.ice
import numpy as np
from aiohttp import web
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import OutputAudioRawFrame, VADUserStoppedSpeakingFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineTask
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.request_handler import (
    SmallWebRTCRequest,
    SmallWebRTCRequestHandler,
)
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport

aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
PORT, LOG = int(sys.argv[1]), sys.argv[2]
STOP_SECS = 0.3
RATE = 24_000


def log(event, **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps({"event": event, "t_ns": time.monotonic_ns(), **kw}) + "\n")


class ToneReply(FrameProcessor):
    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            log("vad_stop", stop_secs=STOP_SECS)
            n = int(0.8 * RATE)
            x = (6000 * np.sin(2 * np.pi * 440 * np.arange(n) / RATE)).astype(np.int16)
            for k in range(0, n, RATE // 50):
                await self.push_frame(
                    OutputAudioRawFrame(x[k : k + RATE // 50].tobytes(), RATE, 1)
                )
            log("reply_pushed")


handler = SmallWebRTCRequestHandler()


async def run_bot(connection):
    transport = SmallWebRTCTransport(
        webrtc_connection=connection,
        params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
    )
    vad = VADProcessor(vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=STOP_SECS)))
    pipeline = Pipeline([transport.input(), vad, ToneReply(), transport.output()])
    task = PipelineTask(pipeline)

    @transport.event_handler("on_client_disconnected")
    async def on_disconnected(transport, client):
        await task.cancel()

    log("bot_start")
    await PipelineRunner(handle_sigint=False).run(task)


async def offer(request):
    body = await request.json()
    tasks = []

    async def cb(connection):
        tasks.append(asyncio.create_task(run_bot(connection)))

    answer = await handler.handle_web_request(SmallWebRTCRequest.from_dict(body), cb)
    return web.json_response(answer)


app = web.Application()
app.router.add_post("/api/offer", offer)
web.run_app(app, host="127.0.0.1", port=PORT, print=lambda *a: None)
"""


def pipecat_python() -> str | None:
    for cand in (os.environ.get("RIG_PIPECAT_PYTHON"), "/tmp/pcvenv/bin/python", sys.executable):
        if not cand or not os.path.exists(cand):
            continue
        probe = subprocess.run(
            [cand, "-c", "import pipecat.transports.smallwebrtc.transport, aiohttp"],
            capture_output=True,
            timeout=60,
        )
        if probe.returncode == 0:
            return cand
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"pipecat bot exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    wait_for(listening, timeout_s=timeout_s, every_s=0.2, what="the pipecat bot to listen")


@pytest.fixture
def pipecat_bot(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    python = pipecat_python()
    if python is None:
        pytest.skip("pipecat-ai[webrtc,silero] is not installed (set RIG_PIPECAT_PYTHON)")
    bot = tmp_path / "bot.py"
    bot.write_text(BOT_SOURCE)
    log = tmp_path / "bot.jsonl"
    port = _free_port()
    with open(tmp_path / "bot.out", "wb") as out:
        proc = subprocess.Popen([python, str(bot), str(port), str(log)], stdout=out, stderr=out)
    try:
        _wait_listening(port, proc)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)


async def test_rollout_against_a_pipecat_smallwebrtc_bot(
    tmp_path: Path, pipecat_bot: tuple[int, Path]
) -> None:
    port, log = pipecat_bot
    plan = (
        PlanBuilder(48_000)
        .add_silence(0.5)
        .add_wav(data_path("turn_what.wav"), "t0")
        .add_silence(2.5)
        .build()
    )
    metrics, chunks, events = await _rollout(
        f"http://127.0.0.1:{port}", tmp_path / "out", "pipecat", plan=plan
    )
    assert metrics["status"] == "ok", metrics.get("reason")
    bot_events = [json.loads(x) for x in log.read_text().splitlines() if x]
    vad = [e["t_ns"] for e in bot_events if e["event"] == "vad_stop"]
    assert len(vad) == 1, bot_events
    (resp,) = metrics["responses"]
    assert resp["latency_ms"] is not None
    # the bot's VAD stop comes after the user's speech ended, by its stop_secs (0.3 s) plus
    # its own jitter buffer and VAD windows: never before, and not seconds later
    assert 0.3 <= (vad[0] - resp["user_end_ns"]) / 1e9 <= 0.8
    # the reply reached our socket after the VAD stop, by pipecat's output buffering + network
    parts = decompose(resp, chunks)
    assert parts is not None and parts["jitter_buffer_ms"] is not None
    reached_ns = resp["onset_arrival_ns"] - (parts["jitter_buffer_ms"] + 6.5) * 1e6
    assert 0 <= (reached_ns - vad[0]) / 1e6 <= 150.0
    assert any(e["kind"] == "server.rtcp.rr" and e.get("rtt_ms") for e in events)
