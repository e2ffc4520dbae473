"""The official google-genai client through `rig proxy --dialect gemini` to the Gemini fake.

The client speaks as it speaks to Google (snake_case `realtime_input`, `mime_type`, URL-safe
base64, `wss://` with an API key header); a local TLS front takes its TLS (the SDK forces
wss whenever it has an API key) and pipes the bytes to the proxy. The fake answers as the
service documents (serverContent audio, turnComplete) and reports its voice activity
(`voiceActivity`), so the proxy's rollout has audio both ways, a user turn, a latency and
the endpointing split (detect / generation from the system's own end-of-turn signal).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fakes.gemini_server import FakeGeminiServer
from tests.support.proxyproc import start_proxy, stop_proxy
from tests.support.tlsfront import TlsFront

pytestmark = pytest.mark.realtime

RATE = 16_000
FRAME = RATE // 50  # 20 ms


def _speech() -> np.ndarray:
    """0.8 s of tone, then 1.2 s of silence: one user turn for the fake's VAD."""
    t = np.arange(int(0.8 * RATE)) / RATE
    tone = (np.sin(2 * np.pi * 300 * t) * 0.3 * 32767).astype("<i2")
    return np.concatenate([tone, np.zeros(int(1.2 * RATE), "<i2")])


async def _client(base_url: str, ssl_ctx: Any) -> dict[str, Any]:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(
        api_key="test-key-not-real",
        http_options=types.HttpOptions(base_url=base_url, async_client_args={"ssl": ssl_ctx}),
    )
    got: dict[str, Any] = {"audio_bytes": 0, "turn_complete": False, "kinds": []}
    config = {"response_modalities": ["AUDIO"]}
    async with client.aio.live.connect(model="gemini-live-2.5-flash-preview", config=config) as s:

        async def send() -> None:
            pcm = _speech()
            for k in range(0, pcm.size, FRAME):
                blob = types.Blob(
                    data=pcm[k : k + FRAME].tobytes(), mime_type="audio/pcm;rate=16000"
                )
                await s.send_realtime_input(audio=blob)
                await asyncio.sleep(0.02)

        sender = asyncio.create_task(send())
        async with asyncio.timeout(20):
            async for msg in s.receive():
                if msg.data:
                    got["audio_bytes"] += len(msg.data)
                if msg.voice_activity is not None:
                    got["kinds"].append(str(msg.voice_activity.voice_activity_type))
                if msg.server_content is not None and msg.server_content.turn_complete:
                    got["turn_complete"] = True
                    break
        await sender
        await s.send_realtime_input(audio_stream_end=True)
    return got


async def test_google_genai_client_through_the_proxy(tmp_path: Path) -> None:
    pytest.importorskip("google.genai")
    async with FakeGeminiServer(reply_s=0.8, model_delay_s=0.3, voice_activity=True) as srv:
        proxy, url = await asyncio.to_thread(
            start_proxy, srv.url, str(tmp_path / "px"), "--run-id", "g", "--dialect", "gemini",
            "--record-audio",
        )  # fmt: skip
        try:
            port = int(url.rsplit(":", 1)[1])
            async with TlsFront(tmp_path, "127.0.0.1", port) as front:
                got = await _client(f"https://127.0.0.1:{front.port}", front.client_context())
        finally:
            said = await asyncio.to_thread(stop_proxy, proxy)
    # the client itself was answered (the pass-through is whole)
    assert got["turn_complete"] and got["audio_bytes"] >= 0.7 * 24_000 * 2, got
    assert any("ACTIVITY_END" in k for k in got["kinds"]), got
    (conn,) = srv.conns
    assert conn.setup is not None and sum(a.size for a in conn.audio) >= 1.9 * RATE
    # the proxy's rollout: measured, not a protocol error
    (metrics_path,) = (tmp_path / "px" / "g").glob("rollouts/*/metrics.json")
    m = json.loads(metrics_path.read_text())
    assert m["status"] == "ok", (m["status"], m.get("reason"), said[-2000:])
    assert m["uplink"]["audio_s"] >= 1.9, m["uplink"]
    assert m["downlink"]["audio_s"] >= 0.7, m["downlink"]
    # one user turn, found in the client's audio, answered once
    (resp,) = m["responses"]
    assert resp["turn"] == 0 and resp["user_end_ns"] is not None, resp
    # the fake answers its VAD's stop (400 ms of silence) after 300 ms of model time: the
    # split says so from its voiceActivity end (a few frames of slack on a busy box)
    assert 650.0 <= resp["latency_ms"] <= 1000.0, resp
    assert resp["decision_source"] == "speech_stopped", resp
    assert 290.0 <= resp["generation_ms"] <= 400.0, resp
    assert 380.0 <= resp["detect_ms"] <= 560.0, resp
    assert resp["speech_end_offset_ms"] is not None  # audioOffset, on the sent stream
    events = [
        json.loads(x) for x in (metrics_path.parent / "events.jsonl").read_text().splitlines()
    ]
    kinds = {e["kind"] for e in events}
    assert {"server.speech_started", "server.speech_stopped"} <= kinds, kinds
    assert not any(k.endswith("unknown") for k in kinds), kinds
