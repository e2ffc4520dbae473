"""WebRTC transport: loopback ICE, RTCP bookkeeping, and end-to-end against the WebRTC sim."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiortc.rtp import RtcpReceiverInfo, RtcpRrPacket, RtcpSenderInfo, RtcpSrPacket

from rig.analysis.webrtc import decompose
from rig.clock.base import MonotonicClock
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.sim.engine import SimConfig
from rig.sim.truth import read_truth
from rig.sim.webrtc_server import WebRtcSimServer
from rig.transports.webrtc import WebRtcTransport, get_signalling
from rig.transports.webrtc.peer import gather_on, make_peer
from rig.transports.webrtc.stats import NTP_UNIX_OFFSET_S, RtcpLedger, ntp_to_unix_ms
from tests.support.webrtc import webrtc_plan as _plan
from tests.support.webrtc import webrtc_rollout as _rollout

RATE = 48_000


# --- sans-I/O RTCP bookkeeping -------------------------------------------------------------


def _ntp(unix_s: float) -> int:
    whole = int(unix_s)
    return ((whole + NTP_UNIX_OFFSET_S) << 32) | int((unix_s - whole) * (1 << 32))


def test_rtt_from_sr_and_rr_uses_our_stamps_and_dlsr() -> None:
    led = RtcpLedger()
    ntp = _ntp(1_700_000_000.25)
    sr = RtcpSrPacket(ssrc=11, sender_info=RtcpSenderInfo(ntp, 1000, 5, 500))
    led.on_sent([sr], t_ns=1_000_000_000)
    lsr = (ntp >> 16) & 0xFFFF_FFFF
    dlsr = int(0.5 * 65536)  # the far end held our SR for 500 ms
    rr = RtcpRrPacket(
        ssrc=22,
        reports=[RtcpReceiverInfo(11, 64, 3, 99, 480, lsr, dlsr)],
    )
    ((kind, data, _),) = led.on_received([rr], t_ns=1_000_000_000 + 530_000_000)
    assert kind == "rtcp.rr"
    assert data["rtt_ms"] == pytest.approx(30.0, abs=0.01)
    assert data["jitter_ms"] == pytest.approx(10.0)
    assert data["fraction_lost"] == pytest.approx(0.25)
    assert data["packets_lost"] == 3
    # a report quoting an SR we never sent gives no RTT, rather than a made-up one
    rr2 = RtcpRrPacket(ssrc=22, reports=[RtcpReceiverInfo(11, 0, 0, 100, 0, lsr ^ 1, dlsr)])
    assert led.on_received([rr2], t_ns=2_000_000_000)[0][1]["rtt_ms"] is None
    assert led.summary()["rtt_samples"] == 1


def test_sender_report_maps_rtp_onto_the_senders_clock_across_a_wrap() -> None:
    led = RtcpLedger(48_000)
    ntp = _ntp(1_700_000_000.0)
    sr = RtcpSrPacket(ssrc=7, sender_info=RtcpSenderInfo(ntp, 0xFFFF_FF00, 10, 1000))
    ((kind, data, server_ms),) = led.on_received([sr], t_ns=5)
    assert kind == "rtcp.sr" and server_ms == pytest.approx(1_700_000_000_000.0, abs=1e-3)
    # 48 000 ticks after the SR's RTP timestamp (wrapping past 2**32) is one second later
    later = (0xFFFF_FF00 + 48_000) & 0xFFFF_FFFF
    assert led.rtp_to_server_ms(7, later) == pytest.approx(1_700_000_001_000.0, abs=1e-3)
    assert led.rtp_to_server_ms(8, later) is None
    assert ntp_to_unix_ms(ntp) == pytest.approx(1.7e12)


# --- ICE on loopback -----------------------------------------------------------------------


def _candidate_hosts(sdp: str) -> set[str]:
    return {ln.split()[4] for ln in sdp.splitlines() if ln.startswith("a=candidate:")}


async def test_loopback_gathering_is_scoped_and_uses_no_stun() -> None:
    pc = make_peer()
    pc.addTransceiver("audio")
    with gather_on(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    assert _candidate_hosts(pc.localDescription.sdp) == {"127.0.0.1"}
    assert "srflx" not in pc.localDescription.sdp  # no STUN server was asked
    await pc.close()
    other = make_peer()
    other.addTransceiver("audio")
    await other.setLocalDescription(await other.createOffer())  # outside: aioice's default
    assert "127.0.0.1" not in _candidate_hosts(other.localDescription.sdp)
    await other.close()


# --- end to end against the WebRTC reference system ----------------------------------------


@pytest.mark.realtime
async def test_response_latency_matches_ground_truth(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    sim = WebRtcSimServer(
        SimConfig(latency_ms=350.0, endpoint_silence_ms=300.0, reply_s=0.6),
        truth_log=str(truth_path),
    )
    url = await sim.start("127.0.0.1", 0)
    try:
        metrics, chunks, events = await _rollout(url, tmp_path / "out")
    finally:
        await sim.stop()
    assert metrics["status"] == "ok", metrics.get("reason")
    truth = read_truth(str(truth_path))
    wire = [t for t in truth if t["event"] == "reply_wire"]
    assert len(wire) == 1 and len(metrics["responses"]) == 1
    resp = metrics["responses"][0]
    assert resp["latency_ms"] is not None
    # ground truth: the reply's first sample left the sim at onset_wire_ns; the user's last
    # speech sample left the rig at user_end_ns (both on the one shared clock)
    truth_ms = (wire[0]["onset_wire_ns"] - resp["user_end_ns"]) / 1e6
    parts = decompose(resp, chunks)
    assert parts is not None and parts["jitter_buffer_ms"] is not None
    assert abs(parts["wire_latency_ms"] - truth_ms) <= 10.0, (parts, truth_ms)
    # the rig-local share is real and recorded per chunk: aiortc's audio jitter buffer
    assert 20.0 <= parts["jitter_buffer_ms"] <= 200.0
    down = [c for c in chunks if c["dir"] == "down"]
    assert all("rtp_ts" in c and "pkt_arrival_ns" in c for c in down)
    # the sim's model latency is inside what the rig measured
    model = [t for t in truth if t["event"] == "reply_scheduled"][0]
    assert truth_ms > 350.0 and model["reply_start_ns"] - model["t_ns"] == 350_000_000
    # RTCP: round-trip times from receiver reports, on loopback well under 10 ms
    rtts = [e.get("rtt_ms") for e in events if e["kind"] == "server.rtcp.rr"]
    rtts = [r for r in rtts if r is not None]
    assert rtts and all(0.0 < r < 10.0 for r in rtts)
    # ... shown like every other target's round trips (rig.core.path, clock_fit, rig report)
    rtcp = metrics["clock_fit"]["rtt_by_source"]["rtcp"]
    assert rtcp["source"] == "rtcp" and rtcp["count"] == len(rtts)
    assert any(e["kind"] == "server.rtcp.sr" for e in events)
    # downlink frames carry the sender's clock once its first SR arrived (for the clock fit)
    assert any(c.get("server_ts_ms") is not None for c in down)
    # uplink: every frame went out, nothing dropped or stuck in the track
    assert metrics["uplink"]["frames"] > 100


@pytest.mark.realtime
async def test_pipecat_style_signalling_against_the_sim(tmp_path: Path) -> None:
    sim = WebRtcSimServer(SimConfig(latency_ms=200.0, endpoint_silence_ms=300.0, reply_s=0.3))
    url = await sim.start("127.0.0.1", 0)
    base = url.rsplit("/", 1)[0] + "/api/offer"
    try:
        metrics, _, events = await _rollout(base, tmp_path / "out", "pipecat")
    finally:
        await sim.stop()
    assert metrics["status"] == "ok", metrics.get("reason")
    assert metrics["responses"][0]["latency_ms"] is not None
    assert any(e["kind"] == "server.webrtc.connected" for e in events)


async def test_unreachable_offer_endpoint_is_a_transport_error(unused_tcp_port: int) -> None:
    from rig.errors import TransportError

    url = f"http://127.0.0.1:{unused_tcp_port}/offer"
    tr = WebRtcTransport(get_signalling("whip", url), MonotonicClock(), target_host="127.0.0.1")
    with pytest.raises(TransportError):
        await tr.open()
    await tr.close()


class FakeRealtimeCalls(WebRtcSimServer):
    """A stand-in for OpenAI's hosted calls endpoint: checks the key, then answers as the sim."""

    seen: list[tuple[str, str]]

    async def _route(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes, dict[str, str]]:
        self.seen.append((path, headers.get("authorization", "")))
        if headers.get("authorization") != "Bearer test-key":
            return 401, "application/json", b'{"error": "bad key"}', {}
        if method == "POST" and path.startswith("/v1/realtime/calls"):
            if headers.get("content-type") != "application/sdp":
                return 400, "text/plain", b"want application/sdp", {}
            _, answer = await self._accept(body.decode())
            return 201, "application/sdp", answer.encode(), {}
        return 404, "text/plain", b"", {}


@pytest.mark.realtime
async def test_openai_signalling_events_on_the_oai_events_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    sim = FakeRealtimeCalls(SimConfig(latency_ms=200.0, endpoint_silence_ms=300.0, reply_s=0.3))
    sim.seen = []
    base = (await sim.start("127.0.0.1", 0)).rsplit("/", 1)[0]
    url = base + "/v1/realtime/calls"
    try:

        def make(clock: Any, gate: asyncio.Semaphore) -> WebRtcTransport:
            sig = get_signalling("openai", url, model="gpt-realtime")
            return WebRtcTransport(sig, clock, open_gate=gate, target_host="127.0.0.1")

        spec = RolloutSpec("r0", _plan(), make, {}, {}, SessionConfig(drain_quiet_s=0.6, max_s=15))
        await Runner(
            str(tmp_path / "out"), RunnerSettings(run_id="run"), clock=MonotonicClock()
        ).run([spec])
    finally:
        await sim.stop()
    assert sim.seen == [("/v1/realtime/calls?model=gpt-realtime", "Bearer test-key")]
    d = tmp_path / "out" / "run" / "rollouts" / "r0"
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["status"] == "ok", metrics.get("reason")
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines() if x]
    kinds = [e["kind"] for e in events]
    # the sim's events came over the data channel, through the OpenAI dialect's decoder
    assert "server.speech_stopped" in kinds and "server.response.start" in kinds
    stop = next(e for e in events if e["kind"] == "server.speech_stopped")
    assert stop["t_ns"] < metrics["responses"][0]["onset_arrival_ns"]
    manifest = (tmp_path / "out" / "run" / "manifest.json").read_text()
    assert "test-key" not in manifest


async def test_openai_signalling_without_a_key_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rig.errors import ConfigError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        await get_signalling("openai", "http://127.0.0.1:9/v1/realtime/calls").exchange("v=0")
