"""Without timerfd (macOS, or any platform where the ctypes lookup fails) MonotonicClock falls
back to asyncio's timer: still never early, and the manifest says which wake-up was used."""

from __future__ import annotations

import asyncio
import time

import pytest

from rig.clock import timer
from rig.clock.base import MonotonicClock
from rig.recordings.manifest import build_manifest


def test_no_timerfd_means_asyncio_wakeups_never_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timer, "_LIBC", None)
    assert timer.wakeup_method() == "asyncio"

    async def pace() -> list[int]:
        assert timer.precise_timer() is None
        clock = MonotonicClock()
        t0 = clock.now_ns() + 5_000_000
        late = []
        for k in range(10):
            deadline = t0 + k * 10_000_000
            await clock.sleep_until(deadline)
            late.append(time.monotonic_ns() - deadline)
        return late

    late_ns = asyncio.run(pace())
    assert min(late_ns) >= 0  # a deadline is a floor, whatever timer wakes it
    manifest = build_manifest("r", config={}, targets=[], seed=0, started_ns=0)
    assert manifest["timer"] == "asyncio"


def test_linux_uses_timerfd() -> None:
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux-only")
    assert timer.wakeup_method() == "timerfd"
    assert build_manifest("r", config={}, targets=[], seed=0, started_ns=0)["timer"] == "timerfd"
