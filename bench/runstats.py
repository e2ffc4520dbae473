"""What bench/capacity.py and bench/concurrency.py share: the rollouts they run (a tone turn
per rollout against one URL), the process RSS, and the pooled uplink send lateness of a run
read back from its chunks.jsonl (every frame of every rollout, as the rig recorded it).

Imported as a sibling module (`python bench/capacity.py` puts bench/ on sys.path).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.runs.runner import RolloutSpec
from rig.runs.specs import ws_factory
from rig.session import SessionConfig

RATE = 16_000


def tone_specs(
    url: str, n: int, seconds: float, scenario: str, max_s: float, tick: bool = True
) -> list[RolloutSpec]:
    """`n` rollouts of 0.3 s silence then a `seconds` tone turn, `rig` dialect at `url`;
    `tick` False: the uplink awaits every deadline per stream (SessionConfig.tick)."""
    plan = PlanBuilder(RATE).add_silence(0.3).add_turn(tone(300, seconds, RATE), "t").build()
    return [
        RolloutSpec(
            f"r{i}",
            plan,
            ws_factory(url, "rig", RATE, {}),
            {"url": url},
            {"scenario": scenario, "item": "tone", "kind": "turn_taking"},
            SessionConfig(drain_quiet_s=1.0, max_s=max_s, probe_interval_s=0.5, tick=tick),
        )
        for i in range(n)
    ]


def rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def uplink_lateness_ms(run_dir: str, rollout_ids: list[str]) -> np.ndarray[Any, Any]:
    """Send lateness (actual minus scheduled send time) of every uplink frame of the run."""
    late: list[int] = []
    for rid in rollout_ids:
        path = os.path.join(run_dir, "rollouts", rid, "chunks.jsonl")
        with open(path, encoding="utf-8") as f:
            for line in f:
                if '"dir":"up"' in line:  # the writer's compact JSON; parsed only then
                    c = json.loads(line)
                    late.append(c["t_ns"] - c["t_sched_ns"])
    return np.asarray(late, dtype=np.float64) / 1e6


def uplink_send_ns(run_dir: str, rollout_ids: list[str]) -> list[np.ndarray[Any, Any]]:
    """Send stamps (shared clock, ns) of every uplink frame, one sorted array per rollout."""
    out = []
    for rid in rollout_ids:
        path = os.path.join(run_dir, "rollouts", rid, "chunks.jsonl")
        sent: list[int] = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if '"dir":"up"' in line:
                    sent.append(json.loads(line)["t_ns"])
        out.append(np.sort(np.asarray(sent, dtype=np.int64)))
    return out


def steady_window(
    sent: list[np.ndarray[Any, Any]], cpu: list[tuple[int, float]], margin_ns: int = 500_000_000
) -> dict[str, Any] | None:
    """CPU per uplink frame while every rollout streamed (the floor client's method): from
    the first CPU sample `margin_ns` after the last rollout's first frame to the last one
    `margin_ns` before the first rollout's last frame; connects, set-up, ends and analysis
    hand-offs fall outside. `cpu`: (shared-clock ns, process CPU s) samples in time order."""
    if not sent or any(s.size == 0 for s in sent):
        return None
    lo = max(int(s[0]) for s in sent) + margin_ns
    hi = min(int(s[-1]) for s in sent) - margin_ns
    inside = [(t, c) for t, c in cpu if lo <= t <= hi]
    if len(inside) < 2:
        return None
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    frames = sum(
        int(np.searchsorted(s, t1, "right") - np.searchsorted(s, t0, "left")) for s in sent
    )
    if frames <= 0:
        return None
    return {
        "us_per_frame": round((c1 - c0) / frames * 1e6, 1),
        "window_s": round((t1 - t0) / 1e9, 2),
        "frames": frames,
    }


def lateness_summary_ms(x: np.ndarray[Any, Any]) -> dict[str, float | None]:
    """p50, p99, max of pooled lateness in ms (None for a run with no frame)."""
    if not x.size:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(x, [50, 99])
    return {
        "p50": round(float(p50), 3),
        "p99": round(float(p99), 3),
        "max": round(float(x.max()), 3),
    }
