"""Ticks from the loop's timerfd (rig.clock.timer `call_at`): one wake serves every due
function, in deadline order, never before its deadline; cancel stops it; one function's
exception leaves the others running. The same contract on FakeClock."""

from __future__ import annotations

import asyncio
import time

import pytest

from rig.clock.base import FakeClock, MonotonicClock
from rig.clock.timer import precise_timer, wakeup_method

pytestmark = pytest.mark.skipif(wakeup_method() != "timerfd", reason="needs Linux timerfd")

PERIOD_NS = 5_000_000


async def test_one_wake_serves_every_stream_due_at_it_never_early() -> None:
    clock = MonotonicClock()
    t0 = time.monotonic_ns() + 20_000_000
    calls: list[tuple[int, int, int]] = []  # (stream, deadline, called at)
    done = asyncio.Event()

    def stream(k: int):
        def serve(deadline: int) -> int | None:
            calls.append((k, deadline, time.monotonic_ns()))
            if deadline >= t0 + 9 * PERIOD_NS:
                if k == 4:
                    done.set()
                return None
            return deadline + PERIOD_NS

        return serve

    for k in range(5):  # all on one instant: one wake each period serves the five
        assert clock.call_at(t0, stream(k)) is not None
    async with asyncio.timeout(5):
        await done.wait()
    assert len(calls) == 50
    assert all(at >= deadline for _, deadline, at in calls)  # never early
    by_deadline = [deadline for _, deadline, _ in calls]
    assert by_deadline == sorted(by_deadline)
    for i in range(0, 50, 5):  # same deadline, called in registration order
        assert [k for k, _, _ in calls[i : i + 5]] == [0, 1, 2, 3, 4]


async def test_cancel_stops_a_tick_and_a_failing_one_leaves_the_others(caplog) -> None:
    clock = MonotonicClock()
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx.get("exception")))
    t0 = time.monotonic_ns() + 5_000_000
    seen = {"ok": 0, "bad": 0, "gone": 0}

    def ok(deadline: int) -> int | None:
        seen["ok"] += 1
        return deadline + PERIOD_NS if seen["ok"] < 6 else None

    def bad(deadline: int) -> int | None:
        seen["bad"] += 1
        raise RuntimeError("stream bug")

    def gone(deadline: int) -> int | None:
        seen["gone"] += 1
        return deadline + PERIOD_NS

    clock.call_at(t0, ok)
    clock.call_at(t0, bad)
    h = clock.call_at(t0, gone)
    assert h is not None
    await asyncio.sleep(0.012)
    h.cancel()
    h.cancel()  # twice is fine
    n_gone = seen["gone"]
    await asyncio.sleep(0.05)
    assert seen == {"ok": 6, "bad": 1, "gone": n_gone} and 2 <= n_gone <= 4
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    timer = precise_timer()
    assert timer is not None and not timer._heap  # nothing left armed


def test_no_precise_timer_no_tick() -> None:
    async def main() -> None:
        assert MonotonicClock(precise=False).call_at(time.monotonic_ns(), lambda t: None) is None

    asyncio.run(main())


async def test_fake_clock_ticks_in_virtual_time() -> None:
    clock = FakeClock(0)
    calls: list[tuple[str, int]] = []

    def serve(name: str, last: int):
        def f(deadline: int) -> int | None:
            assert clock.now_ns() == deadline
            calls.append((name, deadline))
            return deadline + 10 if deadline < last else None

        return f

    clock.call_at(10, serve("a", 40))
    clock.call_at(15, serve("b", 35))
    await clock.sleep_until(100)
    assert calls == [
        ("a", 10), ("b", 15), ("a", 20), ("b", 25), ("a", 30), ("b", 35), ("a", 40),
    ]  # fmt: skip


async def test_a_stream_behind_is_served_once_per_wake_and_the_loop_runs_between() -> None:
    clock = MonotonicClock()
    t0 = time.monotonic_ns() - 1_000_000_000  # 1 s behind: 50 frames already due
    calls: list[int] = []
    between: list[int] = []

    def serve(deadline: int) -> int | None:
        calls.append(deadline)
        return deadline + 20_000_000 if len(calls) < 50 else None

    clock.call_at(t0, serve)
    for _ in range(60):  # other callbacks get their turn between two catch-up frames
        await asyncio.sleep(0)
        between.append(len(calls))
    assert len(calls) >= 30
    steps = [b - a for a, b in zip(between, between[1:], strict=False)]
    assert max(steps) <= 1  # never two frames of one stream in one wake


async def test_the_timerfd_is_readable_only_at_a_deadline() -> None:
    """A wake does not read the expiry count when it re-arms (re-arming resets it); a
    wake that leaves nothing armed reads it. Either way the fd is not readable between
    deadlines (a readable fd would wake the loop again and again) nor after the last."""
    import select

    timer = precise_timer()
    assert timer is not None
    fd = timer._fd
    between: list[list[int]] = []
    done = asyncio.Event()
    t0 = time.monotonic_ns() + 5_000_000

    def serve(deadline: int) -> int | None:
        if deadline >= t0 + 3 * 50_000_000:
            asyncio.get_running_loop().call_soon(done.set)
            return None
        # next deadline 50 ms on: right after this wake the fd must be quiet
        asyncio.get_running_loop().call_soon(
            lambda: between.append(select.select([fd], [], [], 0)[0])
        )
        return deadline + 50_000_000

    assert MonotonicClock().call_at(t0, serve) is not None
    async with asyncio.timeout(5):
        await done.wait()
    await asyncio.sleep(0.01)
    assert between == [[], [], []]
    assert select.select([fd], [], [], 0)[0] == []  # the last wake read it: quiet
