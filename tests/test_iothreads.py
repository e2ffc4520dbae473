"""No thread is started from the audio loop while it streams (rig.realtime.IoThreads).

`Thread.start()` waits until the new thread has run, and a new thread starts at normal
priority: on a busy machine the real-time loop waits for it to get a CPU (9 ms median, 43 ms
p99 per start with four CPU hogs, docs/pacing.md). asyncio's `to_thread` pool starts its
threads on demand, from the loop; the runner's blocking calls go to threads started before
the streams instead. These tests record every `Thread.start()` made on the loop's thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig import realtime
from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.session import SessionConfig
from tests.support.simproc import start_sim, stop_sim


@pytest.fixture
def starts_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, str]]]:
    """(native id of the starting thread, name of the started thread) for every start."""
    seen: list[tuple[int, str]] = []
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        seen.append((threading.get_native_id(), self.name))
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    yield seen


def test_to_thread_starts_threads_from_the_loop(starts_on: list[tuple[int, str]]) -> None:
    """The mechanism (why IoThreads exists): asyncio's pool grows from the loop's thread."""

    async def main() -> int:
        await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.05) for _ in range(3)))
        return threading.get_native_id()

    loop_tid = asyncio.run(main())
    assert sum(1 for tid, _ in starts_on if tid == loop_tid) >= 3


def test_io_threads_are_started_before_and_never_from_the_loop(
    starts_on: list[tuple[int, str]],
) -> None:
    async def main() -> tuple[int, int, list[int]]:
        io = realtime.IoThreads(3)
        await io.start()
        before = len(starts_on)
        got = await asyncio.gather(
            *(io.run(lambda k=k: (time.sleep(0.05), k)[1]) for k in range(9))
        )
        after = len(starts_on)
        await io.stop()
        assert before == after, starts_on[before:]
        return threading.get_native_id(), before, got

    loop_tid, before, got = asyncio.run(main())
    assert got == list(range(9))  # results in order, all calls ran
    # started by a worker thread before any call: the loop never waited for one of them
    io_starts = [(tid, name) for tid, name in starts_on[:before] if name.startswith("rig-io")]
    assert [name for _, name in io_starts] == [f"rig-io_{k}" for k in range(3)]
    assert all(tid != loop_tid for tid, _ in io_starts)


def test_a_run_starts_no_thread_from_the_loop_while_streaming(
    tmp_path: Path, starts_on: list[tuple[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six rollouts ending together, each with its short analysis and metrics.json written
    off the loop: before IoThreads, asyncio's pool started threads from the loop here."""
    streaming = [False]
    original = realtime.streaming

    def marked() -> object:
        class Marked:
            def __enter__(self) -> None:
                self.cm = original()
                self.cm.__enter__()
                streaming[0] = True

            def __exit__(self, *exc: object) -> None:
                streaming[0] = False
                self.cm.__exit__(*exc)

        return Marked()

    monkeypatch.setattr(realtime, "streaming", marked)
    during: list[tuple[int, str]] = []
    inner = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if streaming[0]:
            during.append((threading.get_native_id(), self.name))
        inner(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    sim, url = start_sim("--reply-s", "0.2", "--latency-ms", "50", "--endpoint-silence-ms", "200")
    try:
        plan = PlanBuilder(16_000).add_silence(0.1).add_turn(tone(300, 0.4, 16_000), "t").build()
        specs = [
            RolloutSpec(f"r{i}", plan, ws_factory(url, "rig", 16_000, {}), {"url": url}, {},
                        SessionConfig(drain_quiet_s=1.0, max_s=20))
            for i in range(6)
        ]  # fmt: skip
        settings = RunnerSettings(run_id="r", concurrency=6, analyze=False, start_interval_s=0.0)
        runner = Runner(str(tmp_path), settings)

        async def main() -> tuple[int, dict[str, str]]:
            result = await runner.run(specs)
            statuses = {rid: m["status"] for rid, m in result["results"].items()}
            return threading.get_native_id(), statuses

        loop_tid, statuses = asyncio.run(main())
    finally:
        stop_sim(sim)
    assert set(statuses.values()) == {"ok"}, statuses
    assert [name for tid, name in during if tid == loop_tid] == []
