"""The kernel's real-time budget as a run records it, and the closing line that names it
when it may have stopped every stream at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rig.rtbudget import rt_budget, throttle_line

FLAGGED = [{"rollout_id": "a", "timing_valid": True}, {"rollout_id": "b", "timing_valid": False}]


def kernel_dir(tmp_path: Path, runtime: str, period: str | None = "1000000") -> str:
    (tmp_path / "sched_rt_runtime_us").write_text(runtime + "\n")
    if period is not None:
        (tmp_path / "sched_rt_period_us").write_text(period + "\n")
    return str(tmp_path)


@pytest.mark.parametrize(
    ("runtime", "throttles"),
    [("950000", True), ("0", True), ("-1", False), ("1000000", False)],
)
def test_the_budget_as_the_kernel_has_it(tmp_path: Path, runtime: str, throttles: bool) -> None:
    """-1 (no limit) and a runtime of the whole period never stop real-time threads; any
    smaller runtime does (0: real-time threads never run)."""
    got = rt_budget(kernel_dir(tmp_path, runtime))
    assert got == {"runtime_us": int(runtime), "period_us": 1_000_000, "throttles": throttles}


@pytest.mark.parametrize(("runtime", "period"), [("950000", None), ("lots", "1000000"), ("", "1")])
def test_an_unreadable_budget_is_none(tmp_path: Path, runtime: str, period: str | None) -> None:
    assert rt_budget(kernel_dir(tmp_path, runtime, period)) is None


@pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/sched_rt_runtime_us"), reason="Linux")
def test_this_machines_budget_is_read() -> None:
    with open("/proc/sys/kernel/sched_rt_runtime_us", encoding="ascii") as f:
        runtime_us = int(f.read())
    got = rt_budget()
    assert got is not None and got["runtime_us"] == runtime_us and got["period_us"] > 0


def fifo(budget: dict[str, Any] | None) -> dict[str, Any]:
    return {"policy": "SCHED_FIFO", "priority": 3, "rt_budget": budget}


THROTTLING = {"runtime_us": 950_000, "period_us": 1_000_000, "throttles": True}


def test_the_line_names_the_budget_and_the_longest_stop() -> None:
    line = throttle_line(fifo(THROTTLING), FLAGGED)
    assert line is not None
    assert "950000 of every 1000000 µs" in line and "up to 50 ms" in line
    assert "kernel.sched_rt_runtime_us" in line and "docs/pacing.md" in line


def test_workers_list_their_scheduling_one_part_each() -> None:
    """`--workers N`: the manifest holds one scheduling entry per worker."""
    parts = [{"policy": "default"}, fifo(THROTTLING)]
    assert throttle_line(parts, FLAGGED) == throttle_line(fifo(THROTTLING), FLAGGED)
    assert throttle_line([{"policy": "default"}, None], FLAGGED) is None


@pytest.mark.parametrize(
    ("scheduling", "rollouts"),
    [
        (fifo(THROTTLING), [{"timing_valid": True}, {"timing_valid": None}]),  # none flagged
        ({"policy": "default", "rt_budget": THROTTLING}, FLAGGED),  # no real-time loop
        (fifo({**THROTTLING, "runtime_us": -1, "throttles": False}), FLAGGED),  # no limit
        (fifo(None), FLAGGED),  # the budget could not be read
        (None, FLAGGED),  # an older manifest, or none
        ("garbage", FLAGGED),
    ],
)
def test_no_line_where_the_budget_explains_nothing(scheduling: Any, rollouts: Any) -> None:
    assert throttle_line(scheduling, rollouts) is None
