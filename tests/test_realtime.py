"""Real-time scheduling for the audio loop's thread: SCHED_FIFO inside, only for that thread,
nothing inherited by threads it starts, restored on exit, and a clear record (never a crash)
where the privilege is missing."""

import errno
import os
import threading

import pytest

from rig import realtime

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


@needs_fifo
def test_fifo_for_the_calling_thread_only_and_restored() -> None:
    before = os.sched_getscheduler(0)
    other_seen: list[int] = []
    ready, go = threading.Event(), threading.Event()

    def other() -> None:
        ready.set()
        go.wait(5)
        other_seen.append(os.sched_getscheduler(0))

    t = threading.Thread(target=other)
    t.start()
    ready.wait(5)
    with realtime.scheduling(3) as got:
        assert got == {"policy": "SCHED_FIFO", "priority": 3, "requested_priority": 3}
        assert os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO
        assert os.sched_getparam(0).sched_priority == 3
        # a thread that already existed keeps normal scheduling; a new one does not inherit
        go.set()
        t.join()
        assert other_seen == [os.SCHED_OTHER]
        assert policy_of_new_thread() == os.SCHED_OTHER
    assert os.sched_getscheduler(0) == before
    assert os.sched_getparam(0).sched_priority == 0


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

    from rig.runner import Runner

    def refuse(*_: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    lines: list[str] = []
    runner = Runner(str(tmp_path), run_id="r", rt_priority=3, analyze=False, progress=lines.append)
    await runner.run([])
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["scheduling"]["policy"] == "default"
    assert manifest["config"]["rt_priority"] == 3
    assert any(line.startswith("note: normal scheduling for the audio loop") for line in lines)
