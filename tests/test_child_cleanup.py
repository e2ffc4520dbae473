"""SIGKILL of `rig run` leaves no process behind, and the run resumes (issue #15 row 3).

The analysis worker (a spawned process) used to outlive a killed parent forever, reparented
to init. Now it holds a parent-death signal and watches its parent: 2 s after the kill,
every descendant of the killed process is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(x) for x in f.read().split())
        except FileNotFoundError:
            continue
    return out


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its reaping is left


def _rig_run(url: str, out: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rig",
            "run",
            os.path.join("rig", "data", "turn_what.wav"),
            "--target",
            url,
            "--out",
            out,
            "--run-id",
            "k",
            "--headless",
            "--rt-priority",
            "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )


def test_no_child_left_two_seconds_after_sigkill_and_resume_completes(tmp_path) -> None:
    sim, url = start_sim("--latency-ms", "100", "--endpoint-silence-ms", "300", "--reply-s", "2")
    out = str(tmp_path / "out")
    try:
        run = _rig_run(url, out)
        assert run.stderr is not None
        assert run.stderr.readline().endswith(": start\n")  # the worker started before this
        kids = _descendants(run.pid)
        assert kids, "the analysis worker should be running by now"
        time.sleep(1.0)  # mid-stream
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(p) for p in kids):
            time.sleep(0.05)
        left = sorted(p for p in kids if _alive(p))
        for p in left:  # do not leak them into the rest of the suite
            os.kill(p, signal.SIGKILL)
        assert not left, f"children still alive 2 s after SIGKILL: {left}"
        # the killed run resumes to a complete one
        again = _rig_run(url, out)
        _, err = again.communicate(timeout=60)
        assert_run_ok(again.returncode, err, Path(out) / "k")
    finally:
        stop_sim(sim)
    manifest = json.loads((tmp_path / "out" / "k" / "manifest.json").read_text())
    assert manifest["status"] == "done"
    assert manifest["status_counts"] == {"ok": 1}
    assert (tmp_path / "out" / "k" / "rollouts" / "turn_what.failed-1").is_dir()
