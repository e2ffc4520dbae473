"""Progress lines: due every interval, counts, rate and ETA from the given times."""

from __future__ import annotations

from rig.reporting.progress import ProgressMeter

S = 1_000_000_000


def test_lines_are_due_every_interval_with_rate_and_eta() -> None:
    m = ProgressMeter(10, start_ns=100 * S, interval_s=10)
    assert m.line(105 * S, []) is None  # not due yet
    assert m.line(110 * S, []) == "progress: 0/10 rollouts done elapsed 10s rate -, ETA -"
    assert m.line(115 * S, ["ok"]) is None
    # 4 done in 60 s: 4/min, 6 left -> 1m30s
    line = m.line(160 * S, ["ok", "ok", "error", "ok"])
    assert line == (
        "progress: 4/10 rollouts done (error 1, ok 3) elapsed 1m00s rate 4.0/min ETA 1m30s"
    )
    assert m.line(161 * S, ["ok"] * 4) is None
    assert m.line(161 * S, ["ok"] * 10, force=True).endswith("ETA 0s")  # type: ignore[union-attr]


def test_skipped_rollouts_do_not_inflate_the_rate() -> None:
    m = ProgressMeter(10, start_ns=0, interval_s=1, skipped=5)
    line = m.line(60 * S, ["ok"] * 6)  # 5 from an earlier attempt, 1 new in 60 s
    assert line is not None and "rate 1.0/min ETA 4m00s" in line


async def test_progress_lines_on_a_fake_clock() -> None:
    """The shell: one line per interval of clock time, from the runner's results as they
    fill; cancelled when the run ends."""
    import asyncio

    from rig.clock import FakeClock
    from rig.reporting.progress import progress_lines

    clock = FakeClock(start_ns=0)
    results: dict[str, dict[str, str]] = {"a": {"status": "ok"}}  # skipped on resume
    lines: list[str] = []
    task = asyncio.ensure_future(progress_lines(results, 4, 1, clock, 5.0, lines.append))

    async def finish(rid: str, at_s: float) -> None:
        await clock.sleep_until(int(at_s * S))
        results[rid] = {"status": "ok" if rid != "c" else "error"}

    await asyncio.gather(finish("b", 3.0), finish("c", 7.0), clock.sleep_until(16 * S))
    task.cancel()
    assert lines == [
        "progress: 2/4 rollouts done (ok 2) elapsed 5s rate 12.0/min ETA 10s",
        "progress: 3/4 rollouts done (error 1, ok 2) elapsed 10s rate 12.0/min ETA 5s",
        "progress: 3/4 rollouts done (error 1, ok 2) elapsed 15s rate 8.0/min ETA 8s",
    ]
