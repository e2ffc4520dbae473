"""`rig proxy` that measures: a real client through the proxy to a real system, the proxy's
run directory against the client's own measurement and the system's truth."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from rig.core.live import fields_of
from rig.protocol import rawpcm
from rig.proxy import RecordingProxy, upstream_for
from rig.sim.engine import SimConfig
from rig.sim.server import SimServer
from rig.sim.truth import read_truth
from tests.fakes.harness import run_rollouts, speech_plan, tone_plan
from tests.fakes.openai_server import FakeRealtimeServer
from tests.support.proxyproc import start_proxy, stop_proxy
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import until

pytestmark = pytest.mark.realtime


def _tone(s: float) -> np.ndarray:
    t = np.arange(int(16_000 * s)) / 16_000
    return (8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)


def _rollouts(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {
        p.parent.name: json.loads(p.read_text())
        for p in sorted(run_dir.glob("rollouts/*/metrics.json"))
    }


def _client_lag_ms(client_metrics: dict[str, Any]) -> float:
    """The client rollout's own worst loop lag: its onset is stamped when its loop gets to it
    (a rig client shares its loop with the proxy and the fake in the in-process tests)."""
    return float(client_metrics["rig_timing"]["loop"]["lag_max_ms"] or 0.0)


def _agrees_with_client(
    proxied: dict[str, Any], client: dict[str, Any], client_metrics: dict[str, Any]
) -> None:
    """The proxy's response, seen from the client (its latency plus the measured client leg
    and the proxy's own forwarding of the reply), is the client's own within 1 ms (plus the
    client-leg estimate's error bar and the client's own recorded loop lag); the two ends of
    the interval are the same instants seen a leg apart on the shared clock."""
    tol_ms = 1.0 + proxied["client_seen_err_ms"] + _client_lag_ms(client_metrics)
    assert proxied["client_seen_latency_ms"] == pytest.approx(client["latency_ms"], abs=tol_ms), (
        proxied,
        client,
        tol_ms,
    )
    up_leg_ms = (proxied["user_end_ns"] - client["user_end_ns"]) / 1e6
    down_leg_ms = (client["onset_ns"] - proxied["onset_ns"]) / 1e6
    # the same speech-end sample and the same onset: only the client leg apart (a frame
    # off would be 20 ms)
    assert -0.5 <= up_leg_ms <= 10.0 and -0.5 <= down_leg_ms <= 10.0, (up_leg_ms, down_leg_ms)


def test_upstream_keeps_its_own_path_or_takes_the_clients() -> None:
    assert upstream_for("ws://h:1", "/v1/realtime?model=x") == "ws://h:1/v1/realtime?model=x"
    assert upstream_for("ws://h:1/fixed", "/other") == "ws://h:1/fixed"


def test_rig_run_through_rig_proxy_to_rig_sim_agrees_with_client_and_truth(tmp_path) -> None:
    """Three processes, as a user runs them: the client's latency, the proxy's and the
    sim's truth agree; both legs' round trips are reported; report and plot work."""
    truth_path = str(tmp_path / "truth.jsonl")
    sim, sim_url = start_sim("--truth-log", truth_path, "--latency-ms", "300",
                             "--endpoint-silence-ms", "400", "--reply-s", "0.6")  # fmt: skip
    try:
        proxy, url = start_proxy(sim_url, str(tmp_path / "px"), "--run-id", "p",
                                 "--record-audio", "--path-interval-s", "0.25")  # fmt: skip
        try:
            r = subprocess.run(
                [sys.executable, "-m", "rig", "run", os.path.join("rig", "data", "turn_what.wav"),
                 "--target", url, "--out", str(tmp_path / "c"), "--run-id", "c", "--headless",
                 "--drain-quiet-s", "0.8"],
                capture_output=True, text=True, timeout=90,
            )  # fmt: skip
        finally:
            said = stop_proxy(proxy)
    finally:
        stop_sim(sim)
    assert_run_ok(r.returncode, r.stderr, tmp_path / "c" / "c")
    assert "1 connections (ok 1)" in said, said
    (client,) = _rollouts(tmp_path / "c" / "c").values()
    px = _rollouts(tmp_path / "px" / "p")
    assert list(px) == ["conn-0001"]
    m = px["conn-0001"]
    assert m["status"] == "ok", m
    (c_resp,) = client["responses"]
    (p_resp,) = m["responses"]
    _agrees_with_client(p_resp, c_resp, client)
    # the sim's truth: from the speech end reaching it to its first reply chunk; the proxy
    # sits between, so its latency is the truth plus the upstream round trip (loopback)
    truth = read_truth(truth_path)
    end = next(t for t in truth if t["event"] == "speech_end")
    first = next(t for t in truth if t["event"] == "reply_chunk")
    true_ms = (first["t_ns"] - end["audio_end_ns"]) / 1e6
    assert p_resp["latency_ms"] == pytest.approx(true_ms, abs=5.0)
    assert p_resp["system_ms"] == pytest.approx(true_ms, abs=2.0 + p_resp["model_err_ms"])
    parts = ("client_leg_ms", "proxy_ms", "upstream_leg_ms", "system_ms", "queue_ms")
    assert sum(p_resp[k] for k in parts) == pytest.approx(
        p_resp["client_seen_latency_ms"], abs=0.01
    )
    for leg in ("client", "upstream"):
        assert m["legs"][leg]["rtt_by_source"]["ws_ping"]["count"] >= 2, m["legs"]
        # both legs stamped by the kernel (rig.transports.kstamp): the client's frames come
        # masked, the upstream's not; each leg's messages that ended a read are exact
        stamps = m["arrival_stamps"][leg]
        assert stamps["source"] == "kernel" and 0 < stamps["exact"] <= stamps["messages"]
    # the tracks: the client's audio as it passed (same length as what the client sent)
    from rig.recordings.wav import read_wav

    user, rate = read_wav(str(tmp_path / "px/p/rollouts/conn-0001/user.wav"))[:2]
    c_user = read_wav(str(tmp_path / "c/c/rollouts/turn_what/user.wav"))[0]
    assert rate == 16_000 and abs(len(user) - len(c_user)) <= 320
    system = read_wav(str(tmp_path / "px/p/rollouts/conn-0001/system.wav"))[0]
    assert np.abs(system).max() > 1000
    assert m["timing"].get("error") is None, m["timing"]
    # the run directory is like any other
    rep = subprocess.run([sys.executable, "-m", "rig", "report", str(tmp_path / "px/p"), "--json"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert "conn-0001" in rep.stdout
    pytest.importorskip("matplotlib")
    png = tmp_path / "t.png"
    plot = subprocess.run([sys.executable, "-m", "rig", "plot",
                           str(tmp_path / "px/p/rollouts/conn-0001"), "-o", str(png)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert plot.returncode == 0 and png.stat().st_size > 1000, plot.stderr


async def test_openai_client_through_the_proxy_with_a_barge_in(tmp_path) -> None:
    """The OpenAI fake, the rig as the client: latencies agree; the client's own
    `conversation.item.truncate` cuts the proxy's playback where the client cut it."""
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def publisher(rid: str) -> Any:
        return lambda e: seen.append((rid, e.kind, fields_of(e)))

    async with FakeRealtimeServer(reply_s=1.5, model_delay_s=0.2) as srv:
        proxy = RecordingProxy(srv.url, str(tmp_path / "px"), dialect="openai",
                               record_audio=True, path_interval_s=0.25,
                               publish_factory=publisher)  # fmt: skip
        url = await proxy.start()
        try:
            what = await run_rollouts(
                str(tmp_path / "a"), [("what", url, "openai", {}, speech_plan(24_000))]
            )
            barge = await run_rollouts(
                str(tmp_path / "b"),
                [("barge", url, "openai", {}, tone_plan(24_000, turns=2, gap_s=1.0))],
            )
        finally:
            await proxy.stop()
    px = _rollouts(tmp_path / "px")
    assert sorted(px) == ["conn-0001", "conn-0002"]
    first, second = px["conn-0001"], px["conn-0002"]
    assert first["status"] == "ok" and second["status"] == "ok", (first, second)
    c = what["what"].metrics
    (c_resp,) = [r for r in c["responses"] if r["latency_ms"] is not None]
    (p_resp,) = [r for r in first["responses"] if r["latency_ms"] is not None]
    _agrees_with_client(p_resp, c_resp, c)
    # barge-in: the client truncated the reply it was playing; so did the proxy's listener
    b = barge["barge"].metrics
    assert b["downlink"]["truncated_samples"] > 0
    assert second["proxy"]["client_truncations"] == 1
    assert second["downlink"]["truncated_samples"] > 0
    assert second["downlink"]["truncated_items"] == b["downlink"]["truncated_items"]
    lines = (tmp_path / "px/rollouts/conn-0002/events.jsonl").read_text().splitlines()
    kinds = [json.loads(x)["kind"] for x in lines]
    assert "client.truncate" in kinds and "playback.truncate" in kinds
    # live telemetry, as a session publishes it (the view and MQTT read these)
    states = [d["state"] for rid, k, d in seen if rid == "conn-0001" and k == "status"]
    assert states == ["running", "done"]
    (live,) = [d for rid, k, d in seen if rid == "conn-0001" and k == "response"]
    assert live["latency_ms"] == p_resp["latency_ms"]
    assert {k for _, k, _ in seen} >= {"chunk", "protocol", "rtt"}


async def _hostile_upstream(ws) -> None:  # type: ignore[no-untyped-def]
    await ws.recv()  # hello
    await ws.send(rawpcm.encode_text("ready", sample_rate=16_000))
    await ws.send(b"RPCX" + b"\0" * 30)  # bad magic
    await ws.send('{"type": "x", "server_ts_ms": 1e400}')  # not a finite number
    async for message in ws:
        if isinstance(message, str) and "end" in message:
            break
    await ws.send(rawpcm.encode_audio(_tone(0.2), 0, None))


async def test_hostile_frames_either_way_are_this_connections_protocol_errors(tmp_path) -> None:
    """Garbage from a client and from an upstream: recorded as protocol errors of that
    connection, everything still forwarded; the proxy and another connection go on."""
    good_sim = SimServer(SimConfig(latency_ms=150, endpoint_silence_ms=300, reply_s=0.4))
    sim_url = await good_sim.start()
    async with serve(_hostile_upstream, "127.0.0.1", 0) as bad:
        bad_url = f"ws://127.0.0.1:{bad.sockets[0].getsockname()[1]}"
        to_sim = RecordingProxy(sim_url, str(tmp_path / "px"), path_interval_s=0.25)
        to_bad = RecordingProxy(bad_url, str(tmp_path / "bad"), path_interval_s=0.25)
        url, bad_proxy_url = await to_sim.start(), await to_bad.start()
        try:

            async def hostile_client() -> None:
                async with connect(url) as ws:
                    await ws.send(rawpcm.hello(16_000))
                    await ws.send(b"\x00\x01\x02")  # shorter than the header
                    await ws.send('{"type": [1, 2]}')  # no string type
                    await ws.send("]" * 10_000)
                    with pytest.raises(ConnectionClosed):  # the sim closes on garbage
                        while True:
                            await asyncio.wait_for(ws.recv(), 5)

            async def to_hostile_upstream() -> list[Any]:
                got = []
                async with connect(bad_proxy_url) as ws:
                    await ws.send(rawpcm.hello(16_000))
                    for k in range(5):
                        await ws.send(rawpcm.encode_audio(_tone(0.02), k, None))
                    await ws.send(rawpcm.encode_text("end"))
                    for _ in range(4):
                        got.append(await asyncio.wait_for(ws.recv(), 5))
                return got

            good, _, got = await asyncio.gather(
                run_rollouts(str(tmp_path / "c"), [("ok", url, "rig", {}, tone_plan(16_000))]),
                hostile_client(),
                to_hostile_upstream(),
            )
            await until(lambda: len(to_sim.results) == 2 and len(to_bad.results) == 1,
                        timeout_s=30, what="every connection's metrics")  # fmt: skip
        finally:
            await to_sim.stop()
            await to_bad.stop()
            await good_sim.stop()
    assert got[1].startswith(b"RPCX")  # garbage is forwarded untouched: the proxy is a proxy
    assert good["ok"].metrics["status"] == "ok"
    statuses = sorted(m["status"] for m in to_sim.results.values())
    assert statuses == ["ok", "protocol_error"], to_sim.results
    (hostile,) = [m for m in to_sim.results.values() if m["status"] == "protocol_error"]
    assert hostile["reason"].startswith("client:") and hostile["proxy"]["protocol_errors"] >= 3
    (ok,) = [m for m in to_sim.results.values() if m["status"] == "ok"]
    assert ok["responses"][0]["latency_ms"] is not None
    (up,) = to_bad.results.values()
    assert up["status"] == "protocol_error" and up["reason"].startswith("upstream:")
    assert up["proxy"]["protocol_errors"] == 2 and up["downlink"]["chunks"] == 1


async def test_credentials_pass_through_and_are_never_written(tmp_path) -> None:
    seen: dict[str, str] = {}

    async def upstream(ws) -> None:  # type: ignore[no-untyped-def]
        seen.update({k.lower(): v for k, v in ws.request.headers.raw_items()})
        await ws.recv()
        ws.transport.abort()  # dies mid-conversation

    async with serve(upstream, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        proxy = RecordingProxy(f"ws://127.0.0.1:{port}", str(tmp_path / "px"), dialect="openai")
        url = await proxy.start()
        headers = {"Authorization": "Bearer sk-secret-9"}
        async with connect(url, additional_headers=headers) as ws:
            await ws.send('{"type":"session.update","session":{"api_key":"sk-secret-9"}}')
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
        await until(lambda: len(proxy.results) == 1, timeout_s=30, what="the metrics")
        await proxy.stop()
    assert seen.get("authorization") == "Bearer sk-secret-9"  # passed upstream...
    for f in (tmp_path / "px").rglob("*"):
        if f.is_file():
            assert b"sk-secret-9" not in f.read_bytes()  # ...and never written down
    (m,) = _rollouts(tmp_path / "px").values()
    assert m["proxy"]["closed_by"] == "upstream"
    for name in ("user.wav", "system.wav", "received.wav"):  # metadata only: no audio
        wav = tmp_path / "px/rollouts/conn-0001" / name
        assert not wav.exists() or wav.stat().st_size <= 44


def _pipecat_python() -> str | None:
    for cand in (os.environ.get("RIG_PIPECAT_PYTHON"), sys.executable):
        if cand and os.path.exists(cand):
            ok = subprocess.run([cand, "-c", "import pipecat.serializers.protobuf"],
                                capture_output=True, timeout=60)  # fmt: skip
            if ok.returncode == 0:
                return cand
    return None


@pytest.mark.pipecat
async def test_real_pipecat_bot_through_the_proxy(tmp_path) -> None:
    """The real Pipecat bot (Silero VAD, its websocket transport and protobuf serializer),
    the rig as the client: the proxy's latency agrees with the client's."""
    python = _pipecat_python()
    if python is None:
        pytest.skip("pipecat-ai is not importable (set RIG_PIPECAT_PYTHON)")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bot = subprocess.Popen(  # noqa: ASYNC220 - started before the loop has work
        [python, os.path.join(os.path.dirname(__file__), "fakes", "pipecat_bot.py"),
         str(port), "0.4", "0.8"],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "bot.log", "w"),  # noqa: SIM115, ASYNC230
    )  # fmt: skip
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        await until(listening, timeout_s=60, every_s=0.2, what="the pipecat bot to listen")
        proxy = RecordingProxy(
            f"ws://127.0.0.1:{port}", str(tmp_path / "px"), dialect="pipecat",
            record_audio=True, path_interval_s=0.25,
        )  # fmt: skip
        url = await proxy.start()
        try:
            rs = await run_rollouts(
                str(tmp_path / "c"),
                [("bot", url, "pipecat", {}, speech_plan(16_000, ("what",), gap_s=2.0))],
                drain_quiet_s=1.0,
            )
        finally:
            await proxy.stop()
    finally:
        bot.terminate()
        bot.wait(10)
    c = rs["bot"].metrics
    assert c["status"] == "ok", c
    (m,) = proxy.results.values()
    assert m["status"] == "ok", m
    (c_resp,) = [r for r in c["responses"] if r.get("latency_ms") is not None]
    (p_resp,) = [r for r in m["responses"] if r.get("latency_ms") is not None]
    _agrees_with_client(p_resp, c_resp, c)
    assert m["downlink"]["audio_s"] == pytest.approx(0.8, abs=0.05)


def test_impair_client_puts_the_relay_on_the_client_leg(tmp_path) -> None:
    """`rig proxy --impair-client`: the client leg carries the delay (its round trips and
    the client-leg share), the upstream leg does not, and the client-seen latency still
    matches what the client measured."""
    sim, sim_url = start_sim("--latency-ms", "200", "--endpoint-silence-ms", "300",
                             "--reply-s", "0.4")  # fmt: skip
    try:
        proxy, url = start_proxy(sim_url, str(tmp_path / "px"), "--run-id", "p",
                                 "--path-interval-s", "0.25",
                                 "--impair-client", "delay=15ms")  # fmt: skip
        try:
            r = subprocess.run(
                [sys.executable, "-m", "rig", "run", os.path.join("rig", "data", "turn_what.wav"),
                 "--target", url, "--out", str(tmp_path / "c"), "--run-id", "c", "--headless",
                 "--drain-quiet-s", "0.8"],
                capture_output=True, text=True, timeout=90,
            )  # fmt: skip
        finally:
            stop_proxy(proxy)
    finally:
        stop_sim(sim)
    assert_run_ok(r.returncode, r.stderr, tmp_path / "c" / "c")
    (client,) = _rollouts(tmp_path / "c" / "c").values()
    (m,) = _rollouts(tmp_path / "px" / "p").values()
    assert m["status"] == "ok", m
    legs = m["legs"]
    assert legs["client"]["rtt_by_source"]["ws_ping"]["rtt_min_ms"] >= 30.0, legs
    assert legs["upstream"]["rtt_by_source"]["ws_ping"]["rtt_p50_ms"] < 20.0, legs
    (c_resp,) = client["responses"]
    (p_resp,) = m["responses"]
    assert p_resp["client_leg_ms"] == pytest.approx(30.0, abs=3.0 + p_resp["client_leg_err_ms"])
    tol_ms = 1.0 + p_resp["client_seen_err_ms"] + _client_lag_ms(client)
    assert p_resp["client_seen_latency_ms"] == pytest.approx(c_resp["latency_ms"], abs=tol_ms)
    assert (tmp_path / "px" / "p" / "impair-client.jsonl").stat().st_size > 0
    manifest = json.loads((tmp_path / "px" / "p" / "manifest.json").read_text())
    assert manifest["config"]["impair_client"]["spec"] == "delay=15ms", manifest["config"]
