"""The analysis worker (rig.childproc.AnalysisWorker): a clean child fed over a pipe.

It runs calls in another process at nice 10, never imports the caller's main module, hands
back exceptions, and when it dies mid-call fails that call and the queued ones with
BrokenProcessPool (the runner then records `analysis_error` and starts a fresh one).
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import signal
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from rig.analysis.finish import timing_params
from rig.childproc import AnalysisWorker
from rig.errors import ConfigError


def _nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_runs_calls_in_a_child_at_nice_10_with_the_preload_imported() -> None:
    pool = AnalysisWorker("rig.analysis.finish")
    try:
        pid = pool.submit(os.getpid).result(60)
        assert pid != os.getpid() and pid == pool.pid
        assert _nice_of(pid) - os.nice(0) in (10, 19 - os.nice(0))  # nice 10 (capped at 19)
        # the preload is in the child already; the caller's main module never is
        # (calls are pickled by reference: stdlib and rig functions, not this test module's)
        mods = pool.submit(eval, "sorted(__import__('sys').modules)").result(30)
        assert "rig.analysis.finish" in mods
        main = pool.submit(eval, "__import__('sys').modules['__main__'].__spec__.name")
        assert main.result(30) == "rig.childproc"
        assert pool.submit(divmod, 7, 2).result(30) == (3, 1)
    finally:
        pool.shutdown()
    assert pool.pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pool.pid, 0)  # exited (and reaped) at shutdown


def test_exceptions_come_back_and_the_worker_goes_on() -> None:
    pool = AnalysisWorker("rig.errors")
    try:
        with pytest.raises(ConfigError, match="unknown timing rule"):
            pool.submit(timing_params, {"no_such_rule": 1}).result(60)
        assert pool.submit(abs, -3).result(30) == 3
        # a call that cannot be pickled is the caller's own error, the worker goes on
        with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
            pool.submit(abs, lambda: 1).result(30)
        assert pool.submit(abs, -4).result(30) == 4
    finally:
        pool.shutdown()


def test_a_worker_killed_mid_call_fails_that_call_and_the_queued_ones() -> None:
    pool = AnalysisWorker("rig.errors")
    try:
        pid = pool.submit(os.getpid).result(60)
        slow = pool.submit(time.sleep, 30)
        queued = pool.submit(abs, -1)
        time.sleep(0.2)  # the sleep is running in the child
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool, match="SIGKILL"):
            slow.result(10)
        with pytest.raises(BrokenProcessPool):
            queued.result(10)
        with pytest.raises(BrokenProcessPool):
            pool.submit(abs, -2)
    finally:
        pool.shutdown()


def test_a_child_that_cannot_start_says_so() -> None:
    pool = AnalysisWorker("rig.no_such_module_here")
    try:
        fut = pool.submit(abs, -1)
        with pytest.raises(BrokenProcessPool, match="did not start: exited with code 1"):
            fut.result(60)
    finally:
        pool.shutdown()


def test_shutdown_cancels_what_was_queued() -> None:
    pool = AnalysisWorker("rig.errors")
    assert pool.submit(abs, -1).result(60) == 1  # started
    running = pool.submit(time.sleep, 0.5)
    deadline = time.monotonic() + 10
    while not running.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    queued = [pool.submit(abs, -k) for k in range(3)]
    pool.shutdown(wait=True, cancel_futures=True)
    assert running.result(0) is None
    assert all(f.cancelled() for f in queued)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(abs, 1)
    assert isinstance(pool, concurrent.futures.Executor)
