"""The real Pipecat bot (no server clock) behind the netns packet-delay relay: RTT from
ping/pong and from TCP_INFO against the relay's setting, and the model-time estimate against
the bot's own log (tests/fakes/pipecat_bot.py, CLOCK_MONOTONIC is shared across namespaces)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.core.units import NS_PER_MS
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from tests.fakes.harness import speech_plan
from tests.support import netimpair
from tests.support.netimpair import ImpairedLink
from tests.support.wait import until

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UP_MS, DOWN_MS, PORT = 20.0, 30.0, 8791

pytestmark = [pytest.mark.realtime, pytest.mark.pipecat]


BOT_SEND_SLACK_MS = 6.0  # serialization -> socket write inside the bot (see below)


def _pipecat_python() -> str | None:
    py = os.environ.get("RIG_PIPECAT_PYTHON")
    return py if py and os.path.exists(py) else None


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def test_real_bot_rtt_and_model_time_through_the_packet_relay(tmp_path: Path) -> None:
    py = _pipecat_python()
    if py is None:
        pytest.skip("set RIG_PIPECAT_PYTHON to an interpreter with pipecat-ai[silero,websocket]")
    reason = netimpair.unavailable_reason()
    if reason:
        pytest.skip(reason)
    truth = tmp_path / "bot.jsonl"
    from rig.dialects import get_dialect
    from rig.transports.websocket import WebSocketTransport

    with ImpairedLink(up_delay_ms=UP_MS, down_delay_ms=DOWN_MS, seed=1) as link:
        bot = link.popen(
            [py, os.path.join(HERE, "fakes", "pipecat_bot.py"), str(PORT), "0.4", "0.6"]
            + [link.ns_addr, str(truth)],
            stdout=open(tmp_path / "bot.out", "w"),  # noqa: SIM115, ASYNC230
            stderr=open(tmp_path / "bot.log", "w"),  # noqa: SIM115, ASYNC230
        )

        def listening() -> bool:
            with socket.socket() as s:
                s.settimeout(0.5)
                return s.connect_ex((link.ns_addr, PORT)) == 0

        try:  # Silero + pipecat import take a few seconds
            await until(listening, timeout_s=90, every_s=0.3, what="the pipecat bot to listen")
        except AssertionError:
            pytest.fail("bot did not start: " + (tmp_path / "bot.log").read_text()[-2000:])
        url = f"ws://{link.ns_addr}:{PORT}"

        def make(clock: Any, gate: asyncio.Semaphore) -> Any:
            return WebSocketTransport(url, get_dialect("pipecat"), clock, open_gate=gate)

        plan = speech_plan(16_000, ("what", "weather"), gap_s=2.0)
        cfg = SessionConfig(drain_quiet_s=1.0, max_s=40, path_interval_s=0.25)
        runner = Runner(str(tmp_path / "out"), RunnerSettings(run_id="run"))
        await runner.run([RolloutSpec("bot", plan, make, {"url": url}, {}, cfg)])
        bot.terminate()
    m = runner.results["bot"]
    assert m["status"] == "ok", m
    path_ms = UP_MS + DOWN_MS
    rtt = m["clock_fit"]["rtt_by_source"]
    # ping/pong and the kernel both see the whole packet path: the relay's round trip plus
    # the host's own (two network stacks, a few tens of µs) and the relay's hold (< 2 ms)
    assert path_ms <= rtt["ws_ping"]["rtt_p50_ms"] <= path_ms + 2.0, rtt
    assert path_ms <= rtt["tcp_info"]["rtt_min_ms"] <= path_ms + 2.0, rtt
    # the bot's log: each audio message's arrival, each reply frame's serialization
    log = _rows(truth)
    rx = np.asarray([r["t_ns"] for r in log if r["ev"] == "audio_in"], dtype=np.int64)
    out = [r["t_ns"] for r in log if r["ev"] == "audio_out"]
    starts = [t for i, t in enumerate(out) if i == 0 or t - out[i - 1] > 300 * NS_PER_MS]
    d = tmp_path / "out" / "run" / "rollouts" / "bot"
    chunks = _rows(d / "chunks.jsonl")
    send = np.asarray([c["t_ns"] for c in chunks if c["dir"] == "up"], dtype=np.int64)
    assert rx.size == send.size, (rx.size, send.size)  # message by message
    answered = [r for r in m["responses"] if r.get("latency_ms") is not None]
    assert len(answered) == len(starts) == 2, (answered, starts)
    for r, start in zip(answered, starts, strict=True):
        assert r["clock_method"] == "rtt_half" and r["rtt_source"] == "ws_ping", r
        k = int(np.searchsorted(send, r["user_end_ns"])) - 1  # the frame holding the end
        p1 = r["user_end_ns"] + int(rx[k] - send[k])
        model_true_ms = (start - p1) / NS_PER_MS
        # the bot stamps a reply frame when it serializes it; its own event loop (pipecat, a
        # Python process on the same 2 cores) may hold the frame a few ms before the socket
        # write the rig's estimate ends at: the truth is a lower bound by up to that much
        err = r["model_ms"] - model_true_ms
        assert -r["model_err_ms"] <= err <= r["model_err_ms"] + BOT_SEND_SLACK_MS, (r, err)
        assert abs(r["uplink_ms"] - (rx[k] - send[k]) / NS_PER_MS) <= r["uplink_err_ms"]
