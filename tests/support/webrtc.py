"""Shared by the WebRTC tests: a one-turn plan and one rollout through the Runner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.plan import PlanBuilder
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.transports.webrtc import WebRtcTransport, get_signalling, target_host

RATE = 48_000


def webrtc_plan(speech_s: float = 0.8) -> Any:
    return (
        PlanBuilder(RATE)
        .add_silence(0.4)
        .add_turn(tone(300.0, speech_s, RATE, -12.0), "t0")
        .add_silence(1.6)
        .build()
    )


async def webrtc_rollout(
    url: str, out: Path, signalling: str = "whip", plan: Any = None, **transport_kw: Any
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    def make(clock: Any, gate: asyncio.Semaphore) -> WebRtcTransport:
        return WebRtcTransport(
            get_signalling(signalling, url),
            clock,
            open_gate=gate,
            target_host=target_host(url),
            **transport_kw,
        )

    spec = RolloutSpec(
        "r0",
        plan if plan is not None else webrtc_plan(),
        make,
        {"url": url, "transport": "webrtc"},
        {},
        SessionConfig(drain_quiet_s=0.6, max_s=15.0),
    )
    runner = Runner(str(out), RunnerSettings(run_id="run"), clock=MonotonicClock())
    await runner.run([spec])
    d = out / "run" / "rollouts" / "r0"
    metrics = json.loads((d / "metrics.json").read_text())
    chunks = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines() if x]
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines() if x]
    return metrics, chunks, events
