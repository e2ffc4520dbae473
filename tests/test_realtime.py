"""Real-time scheduling for the audio loop's thread: SCHED_FIFO inside, the helper priority
for the process's other Python threads (they share the GIL), nothing inherited by processes,
restored on exit, and a clear record (never a crash) where the privilege is missing."""

import errno
import os
import subprocess
import sys
import threading

import pytest

from rig import realtime
from rig.rtbudget import rt_budget

needs_fifo = pytest.mark.skipif(
    not hasattr(os, "sched_setscheduler") or os.geteuid() != 0,
    reason="SCHED_FIFO needs Linux and root (CI runs as root)",
)


def policy_of_new_thread() -> int:
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
    t.start()
    t.join()
    return seen[0]


def policy(tid: int = 0) -> tuple[int, int]:
    """(policy without the reset-on-fork flag, priority) of a thread of this process."""
    return os.sched_getscheduler(tid) & ~os.SCHED_RESET_ON_FORK, os.sched_getparam(
        tid
    ).sched_priority


FIFO_HELPER = (os.SCHED_FIFO, realtime.HELPER_PRIORITY) if hasattr(os, "SCHED_FIFO") else None


@needs_fifo
def test_fifo_for_the_loop_helper_priority_for_other_threads_and_restored() -> None:
    """The loop gets its priority; every other Python thread (it may hold the GIL the loop
    needs) gets the helper priority, below the loop's; no child process inherits either;
    all of it is undone on exit. Before the fix the other threads stayed SCHED_OTHER: a
    preempted writer holding the GIL stalled the real-time loop for 24-32 ms."""
    before = os.sched_getscheduler(0)
    other_seen: list[tuple[int, int]] = []
    ready, go = threading.Event(), threading.Event()

    def other() -> None:
        ready.set()
        go.wait(5)
        other_seen.append(policy())

    t = threading.Thread(target=other)
    t.start()
    ready.wait(5)
    assert t.native_id is not None
    with realtime.scheduling(3) as got:
        assert got == {"policy": "SCHED_FIFO", "priority": 3, "requested_priority": 3,
                       "helper_priority": realtime.HELPER_PRIORITY,
                       "rt_budget": rt_budget()}  # fmt: skip
        assert os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO
        assert os.sched_getparam(0).sched_priority == 3
        # a thread that already existed and a thread started inside: helper priority
        go.set()
        t.join()
        assert other_seen == [FIFO_HELPER]
        assert policy_of_new_thread() & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO
        assert os.sched_getscheduler(0) & os.SCHED_RESET_ON_FORK
        # a process started from the loop or from a helper thread: normal scheduling
        child = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
        assert subprocess.run(child, capture_output=True, text=True).stdout.strip() == "0"
        from_helper: list[str] = []
        h = threading.Thread(target=lambda: from_helper.append(
            subprocess.run(child, capture_output=True, text=True).stdout.strip()))  # fmt: skip
        h.start()
        h.join()
        assert from_helper == ["0"]
    assert os.sched_getscheduler(0) == before
    assert os.sched_getparam(0).sched_priority == 0
    assert policy_of_new_thread() == os.SCHED_OTHER
    assert realtime._HELPERS.raised == 0


@needs_fifo
def test_threads_alive_through_the_run_are_put_back() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, args=(10,))
    t.start()
    assert t.native_id is not None
    try:
        with realtime.scheduling(3):
            started = threading.Thread(target=stop.wait, args=(10,))
            started.start()
            assert started.native_id is not None
            for tid in (t.native_id, started.native_id):
                assert policy(tid) == FIFO_HELPER
        assert policy(t.native_id) == (os.SCHED_OTHER, 0)
        assert policy(started.native_id) == (os.SCHED_OTHER, 0)
    finally:
        stop.set()
        t.join()


@needs_fifo
def test_a_real_time_thread_is_never_lowered() -> None:
    """JACK's or PortAudio's callback threads are real time already: left alone."""
    stop, ready = threading.Event(), threading.Event()

    def audio_thread() -> None:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        ready.set()
        stop.wait(10)

    t = threading.Thread(target=audio_thread)
    t.start()
    ready.wait(5)
    assert t.native_id is not None
    try:
        with realtime.scheduling(3):
            assert policy(t.native_id) == (os.SCHED_FIFO, 10)
        assert policy(t.native_id) == (os.SCHED_FIFO, 10)
    finally:
        stop.set()
        t.join()


@needs_fifo
def test_nested_loops_share_the_helpers() -> None:
    """Two real-time loops in one process (a run and an in-process reference system): a
    thread raised as a helper that becomes a loop itself gets back what it had before."""
    inner_seen: list[tuple[int, int]] = []

    def second_loop() -> None:
        with realtime.scheduling(5):
            inner_seen.append(policy())
        inner_seen.append(policy())

    with realtime.scheduling(3):
        t = threading.Thread(target=second_loop)
        t.start()
        t.join()
        assert policy() == (os.SCHED_FIFO, 3)
    assert inner_seen == [(os.SCHED_FIFO, 5), (os.SCHED_OTHER, 0)]
    assert realtime._HELPERS.raised == 0


@needs_fifo
def test_every_thread_a_run_uses_is_real_time(tmp_path) -> None:
    """The threads that take the GIL at a rollout's end (asyncio's executor, the analysis
    pool's manager and feeder, the writer) run at the helper priority while streaming."""
    import asyncio
    import concurrent.futures
    import multiprocessing

    from rig.recordings.writer import RecordingWriter

    async def main() -> dict[str, tuple[int, int]]:
        with realtime.scheduling(3):
            writer = RecordingWriter()
            writer.start()
            pool = concurrent.futures.ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn")
            )
            try:
                assert await asyncio.get_running_loop().run_in_executor(pool, os.getpid) > 0
                await asyncio.to_thread(os.getpid)
                me = threading.current_thread()
                return {
                    f"{t.name} {type(t).__name__}": policy(t.native_id)
                    for t in threading.enumerate()
                    if t is not me and t.native_id is not None
                }
            finally:
                pool.shutdown()
                writer.close(10)

    seen = asyncio.run(main())
    kinds = " ".join(seen)
    for name in ("rig-writer", "asyncio_0", "QueueFeederThread", "_ExecutorManagerThread"):
        assert name in kinds, seen
    assert set(seen.values()) == {FIFO_HELPER}, seen
    # threads that never take the GIL (OpenBLAS's, started by numpy) are not ours to raise


def test_priority_zero_leaves_scheduling_alone() -> None:
    before = os.sched_getscheduler(0)
    with realtime.scheduling(0) as got:
        assert got == {"policy": "default", "requested_priority": 0}
        assert os.sched_getscheduler(0) == before


def test_missing_privilege_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    with realtime.scheduling(3) as got:
        assert got["policy"] == "default"
        assert got["requested_priority"] == 3
        assert "not permitted" in got["reason"] and "rtprio" in got["reason"]


def test_one_cpu_gets_no_real_time_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    before = os.sched_getscheduler(0)
    with realtime.scheduling(3) as got:
        assert got == {"policy": "default", "requested_priority": 3, "reason": "one CPU"}
        assert os.sched_getscheduler(0) == before


async def test_runner_records_and_says_when_it_runs_without_real_time(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from rig.runs.runner import RunHooks, Runner, RunnerSettings

    def refuse(*_: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    lines: list[str] = []
    runner = Runner(
        str(tmp_path),
        RunnerSettings(run_id="r", rt_priority=3, analyze=False),
        hooks=RunHooks(progress=lines.append),
    )
    await runner.run([])
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["scheduling"]["policy"] == "default"
    assert manifest["config"]["rt_priority"] == 3
    assert any(line.startswith("note: normal scheduling for the audio loop") for line in lines)
