"""Drive real rollouts (Runner + Session + WebSocket transport + dialect) at fake servers."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from rig.audio.source import tone
from rig.core.plan import PlanBuilder, UserPlan
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.scenarios import data_path
from rig.session import SessionConfig


def speech_plan(
    rate: int, words: tuple[str, ...] = ("what",), gap_s: float = 1.6, lead_s: float = 0.3
) -> UserPlan:
    b = PlanBuilder(rate).add_silence(lead_s)
    for w in words:
        b.add_wav(data_path(f"turn_{w}.wav"), w).add_silence(gap_s)
    return b.build()


def tone_plan(
    rate: int, turns: int = 1, turn_s: float = 0.8, gap_s: float = 1.5, lead_s: float = 0.3
) -> UserPlan:
    b = PlanBuilder(rate).add_silence(lead_s)
    for _ in range(turns):
        b.add_turn(tone(300, turn_s, rate), "tone").add_silence(gap_s)
    return b.build()


@dataclass
class Rollout:
    metrics: dict[str, Any]
    events: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    dir: str

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    def find(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]


def _jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


async def run_rollouts(
    out_dir: str,
    jobs: list[tuple[str, str, str, dict[str, Any], UserPlan]],
    *,
    drain_quiet_s: float = 0.8,
    max_s: float = 20.0,
    frame_ms: float = 20.0,
) -> dict[str, Rollout]:
    """jobs: (rollout_id, url, dialect, dialect options, plan); all run concurrently."""
    specs = [
        RolloutSpec(
            rid,
            plan,
            ws_factory(url, dialect, plan.sample_rate, options),
            {"url": url, "dialect": dialect},
            {},
            SessionConfig(frame_ms=frame_ms, drain_quiet_s=drain_quiet_s, max_s=max_s),
        )
        for rid, url, dialect, options, plan in jobs
    ]
    runner = Runner(out_dir, RunnerSettings(run_id="run", concurrency=len(specs)))
    await runner.run(specs)
    out = {}
    for rid, *_ in jobs:
        d = os.path.join(runner.run_dir, "rollouts", rid)
        out[rid] = Rollout(
            runner.results[rid],
            _jsonl(os.path.join(d, "events.jsonl")),
            _jsonl(os.path.join(d, "chunks.jsonl")),
            d,
        )
    return out
