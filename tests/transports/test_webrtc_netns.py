"""WebRTC under real packet delay: the sim in a network namespace behind the TAP relay.

The relay delays every frame (20 ms up, 30 ms down); the RTCP round-trip time the rig reports
must agree with 50 ms, and its one-way downlink estimate with 30 ms, within 5 ms each.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rig.clock.base import MonotonicClock
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.transports.webrtc import WebRtcTransport, get_signalling
from tests.support import netimpair
from tests.support.netimpair import ImpairedLink
from tests.support.wait import wait_for
from tests.support.wallclock import unsteady_wall_clock_reason
from tests.support.webrtc import webrtc_plan as _plan

pytestmark = [pytest.mark.netns, pytest.mark.realtime]

UP_MS, DOWN_MS, PORT = 20.0, 30.0, 8790


def _wait_listening(host: str, port: int, timeout_s: float = 20.0) -> None:
    def listening() -> bool:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            return False

    wait_for(listening, timeout_s=timeout_s, every_s=0.2, what=f"the sim on {host}:{port}")


def one_way_down_ms(chunks: list[dict[str, Any]], wall_minus_mono_ns: int) -> float | None:
    """Median of (packet arrival - sender's clock at that RTP timestamp) on one host.

    `server_ts_ms` maps each frame's RTP timestamp onto the sender's wall clock through its
    RTCP SR; both ends share the host's clocks, so wall - mono converts it to the shared clock.
    """
    d = [
        (c["pkt_arrival_ns"] - (round(c["server_ts_ms"] * 1e6) - wall_minus_mono_ns)) / 1e6
        for c in chunks
        if c.get("dir") == "down" and c.get("server_ts_ms") and c.get("pkt_arrival_ns")
    ]
    return statistics.median(d) if d else None


async def test_rtcp_rtt_and_one_way_agree_with_packet_delay(tmp_path: Path) -> None:
    reason = netimpair.unavailable_reason() or await asyncio.to_thread(unsteady_wall_clock_reason)
    if reason:
        pytest.skip(reason)
    truth = tmp_path / "truth.jsonl"
    with ImpairedLink(up_delay_ms=UP_MS, down_delay_ms=DOWN_MS, jitter_ms=0.0, seed=1) as link:
        link.popen(
            [sys.executable, "-m", "rig", "sim", "--transport", "webrtc", "--host", link.ns_addr]
            + ["--port", str(PORT), "--truth-log", str(truth), "--latency-ms", "300"]
            + ["--endpoint-silence-ms", "300", "--reply-s", "1.5"]
        )
        await asyncio.to_thread(_wait_listening, link.ns_addr, PORT)
        url = f"http://{link.ns_addr}:{PORT}/offer"

        def make(clock: Any, gate: asyncio.Semaphore) -> WebRtcTransport:
            return WebRtcTransport(
                get_signalling("whip", url), clock, host_addresses=[link.host_addr], open_gate=gate
            )

        spec = RolloutSpec(
            "r0", _plan(1.0), make, {"url": url}, {}, SessionConfig(drain_quiet_s=0.6, max_s=20)
        )
        wall_minus_mono = time.time_ns() - time.monotonic_ns()
        await Runner(
            str(tmp_path / "out"), RunnerSettings(run_id="run"), clock=MonotonicClock()
        ).run([spec])
    d = tmp_path / "out" / "run" / "rollouts" / "r0"
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["status"] == "ok", metrics.get("reason")
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines() if x]
    chunks = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines() if x]
    rtts = [e["rtt_ms"] for e in events if e["kind"] == "server.rtcp.rr" and e.get("rtt_ms")]
    assert len(rtts) >= 2
    assert abs(statistics.median(rtts) - (UP_MS + DOWN_MS)) <= 5.0, rtts
    down = one_way_down_ms(chunks, wall_minus_mono)
    assert down is not None and abs(down - DOWN_MS) <= 5.0, down
    assert abs((statistics.median(rtts) - down) - UP_MS) <= 5.0
