"""`rig run --dialect openai --dialect-opt turn_detection=manual` reaches the dialect."""

import asyncio
import json
import threading

import pytest

from rig.cli import main
from tests.fakes.openai_server import FakeRealtimeServer
from tests.support.runexit import assert_run_ok

pytestmark = pytest.mark.realtime


def test_dialect_options_reach_the_dialect_and_the_manifest(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-123")
    ready = threading.Event()
    stop: list[asyncio.Event] = []
    holder: dict[str, FakeRealtimeServer] = {}

    def serve() -> None:
        async def go() -> None:
            async with FakeRealtimeServer(reply_s=0.5) as server:
                holder["s"] = server
                stop.append(asyncio.Event())
                ready.set()
                await stop[0].wait()

        loop = asyncio.new_event_loop()
        holder_loop.append(loop)
        loop.run_until_complete(go())

    holder_loop: list[asyncio.AbstractEventLoop] = []
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(10)
    server = holder["s"]
    try:
        code = main([
            "run", "rig/data/turn_what.wav", "--target", server.url, "--dialect", "openai",
            "--dialect-opt", "turn_detection=manual", "--out", str(tmp_path), "--run-id", "r",
            "--headless", "--drain-quiet-s", "0.8",
        ])  # fmt: skip
    finally:
        holder_loop[0].call_soon_threadsafe(stop[0].set)
        t.join(10)
    assert_run_ok(code, None, tmp_path / "r")
    sent = [e["type"] for e in server.conns[0].events]
    update = next(e for e in server.conns[0].events if e["type"] == "session.update")
    assert "input_audio_buffer.commit" in sent and "response.create" in sent  # manual turns
    assert "turn_detection" in json.dumps(update)
    manifest = (tmp_path / "r" / "manifest.json").read_text()
    assert json.loads(manifest)["config"]["dialect_options"] == {"turn_detection": "manual"}
    for f in (tmp_path / "r").rglob("*"):
        if f.is_file():
            assert b"sk-test-secret-123" not in f.read_bytes(), f


def test_malformed_dialect_option_is_a_clear_error(tmp_path) -> None:
    code = main(
        [
            "run",
            "rig/data/turn_what.wav",
            "--target",
            "ws://127.0.0.1:9",
            "--dialect",
            "openai",
            "--dialect-opt",
            "oops",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 2
