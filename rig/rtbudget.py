"""The kernel's real-time budget: how much of each period the machine's real-time threads
may run before the kernel stops them all until the period ends.

Linux lets SCHED_FIFO/SCHED_RR threads run `kernel.sched_rt_runtime_us` of every
`kernel.sched_rt_period_us` (950 000 of 1 000 000 µs by default; -1: no limit). The rig's
loop and helpers are real time (rig.realtime), and so is `rig sim`'s loop. When together
they fill every CPU, the kernel throttles them all for the rest of the period: every stream
stops at once for up to 50 ms, once a second, while the CPUs idle. Traced on 2026-12-07
(docs/pacing.md, "Twentieth pass"): both loops switched back in within 20 µs of each other
after ~30 ms with both CPUs idle. So a run records the budget it ran under, and its closing
lines name it when rollouts were flagged.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

PROC_KERNEL = "/proc/sys/kernel"


def rt_budget(root: str = PROC_KERNEL) -> dict[str, Any] | None:
    """{"runtime_us", "period_us", "throttles"} as the kernel has them now; None where the
    files cannot be read (not Linux, a restricted /proc) or do not hold integers."""
    try:
        with open(os.path.join(root, "sched_rt_runtime_us"), encoding="ascii") as f:
            runtime_us = int(f.read().strip())
        with open(os.path.join(root, "sched_rt_period_us"), encoding="ascii") as f:
            period_us = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return {
        "runtime_us": runtime_us,
        "period_us": period_us,
        "throttles": 0 <= runtime_us < period_us,
    }


def throttle_line(scheduling: Any, rollouts: Iterable[Mapping[str, Any]]) -> str | None:
    """The closing line for a run whose real-time loop ran under a throttling budget and had
    rollouts flagged; None otherwise (nothing to explain, or no real-time loop).
    `scheduling`: the manifest's entry, one process's dict or the workers' list of them."""
    parts = scheduling if isinstance(scheduling, list) else [scheduling]
    budgets = [
        p["rt_budget"]
        for p in parts
        if isinstance(p, Mapping)
        and p.get("policy") == "SCHED_FIFO"
        and isinstance(p.get("rt_budget"), Mapping)
        and p["rt_budget"].get("throttles")
    ]
    if not budgets or not any(m.get("timing_valid") is False for m in rollouts):
        return None
    runtime_us, period_us = int(budgets[0]["runtime_us"]), int(budgets[0]["period_us"])
    stop_ms = (period_us - runtime_us) / 1000
    return (
        f"the kernel lets real-time threads run {runtime_us} of every {period_us} µs "
        "(kernel.sched_rt_runtime_us): where the rig's and the system's real-time loops "
        f"fill every CPU it stops them all for up to {stop_ms:g} ms a period, late frames "
        'on every stream at once; ask for fewer at once (docs/pacing.md, "Twentieth pass")'
    )
