"""Child processes die with their parent, however the parent dies (SIGKILL included); the
analysis worker is one such child, started from rig's own entry point (`AnalysisWorker`).

Why: a `rig run` killed with SIGKILL runs no cleanup, and a spawned worker blocked on its
task queue would wait forever, reparented to init. Two guards, both set up in the child:
  1. `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the kernel kills the child the moment the parent
     (strictly, the parent thread that started it) exits. Linux only.
  2. a daemon thread that checks every `poll_s` whether the parent pid changed (the child
     was reparented): a fallback where prctl is unavailable, and the check that closes the
     race of a parent that died before prctl ran.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import importlib
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

PR_SET_PDEATHSIG = 1
T = TypeVar("T")
#: the child's first message: its preload is imported, calls may come
READY = b"rig-analysis-ready"
#: a worker told to stop (its pipe closed) that has not exited by then is killed
STOP_TIMEOUT_S = 10.0


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits (Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, poll_s: float = 0.5) -> None:
    """Exit as soon as the process `parent_pid` (our parent) is gone."""
    set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="rig-parent-watch", daemon=True).start()


def analysis_pool(preload: str) -> AnalysisWorker:
    """The analysis worker: one process at nice 10 that dies with us and imports `preload`
    (the module whose functions it will run) as it starts, so the analysis stack is loaded
    before the first rollout ends, not on the first call."""
    return AnalysisWorker(preload)


class AnalysisWorker(concurrent.futures.Executor):
    """An executor of one child, `python -P -m rig.childproc`, fed pickled calls one at a time
    over a socket pair.

    Why not a `spawn` ProcessPoolExecutor: multiprocessing's spawn re-imports the caller's
    main module in the child, so a script without `if __name__ == "__main__":` ran its whole
    experiment twice, and from standard input or a notebook the worker could not start at
    all. This child starts from rig's own entry point and never sees the caller's main;
    `-P` keeps the current directory off its path (a user's `numpy.py` shadows nothing), and
    the directory rig is imported from goes first on PYTHONPATH, so it runs this rig.

    A child that dies (killed, crashed) fails the call it was running and every one queued
    with `BrokenProcessPool`, as a process pool does; the caller starts a new worker.
    The child is started from this executor's feeder thread, which lives as long as the
    executor: PR_SET_PDEATHSIG fires when that thread's process exits, however it exits.
    """

    def __init__(self, preload: str, *, python: str | None = None) -> None:
        self._preload = preload
        self._python = python or sys.executable
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._feed, name="rig-analysis-feed", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        """The child's pid once started (tests kill it to prove nothing is lost)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._broken is not None:
                raise BrokenProcessPool(self._broken)
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            fut: concurrent.futures.Future[T] = concurrent.futures.Future()
            self._queue.put(_Job(fut, fn, args, kwargs))
            return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if cancel_futures:
                for job in _drain(self._queue):
                    job.future.cancel()
            self._queue.put(None)
        if wait:
            self._thread.join()

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            self._broken = reason
            for job in _drain(self._queue):
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(BrokenProcessPool(reason))

    def _start(self) -> tuple[subprocess.Popen[bytes], Connection]:
        if not self._python:
            raise OSError("sys.executable is empty: no Python to start the worker with")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        fd = theirs.fileno()
        argv = [self._python, "-P", "-m", "rig.childproc", str(fd), str(os.getpid())]
        try:
            proc = subprocess.Popen(
                [*argv, self._preload], stdin=subprocess.DEVNULL, pass_fds=(fd,), env=env
            )
        finally:
            theirs.close()
        return proc, Connection(ours.detach())

    def _feed(self) -> None:
        """The feeder thread: start the child, wait until it is ready, then one call at a
        time until shutdown or its death."""
        try:
            proc, conn = self._start()
        except OSError as exc:
            self._fail_all(f"analysis worker did not start: {type(exc).__name__}: {exc}")
            return
        self._proc = proc
        try:
            self._serve(proc, conn)
        finally:
            conn.close()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _serve(self, proc: subprocess.Popen[bytes], conn: Connection) -> None:
        try:
            ready = conn.recv_bytes() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self._fail_all(f"analysis worker did not start: {_death(proc)} (see its stderr)")
            return
        while (job := self._queue.get()) is not None:
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                payload = pickle.dumps((job.fn, job.args, job.kwargs), pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - the caller's bad argument, not the worker
                job.future.set_exception(exc)
                continue
            try:
                conn.send_bytes(payload)
                ok, value = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError) as exc:
                reason = f"the analysis worker died mid-call: {_death(proc)} ({exc!r})"
                job.future.set_exception(BrokenProcessPool(reason))
                self._fail_all(reason)
                return
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)


@dataclass(frozen=True, slots=True)
class _Job:
    future: concurrent.futures.Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _drain(q: queue.SimpleQueue[_Job | None]) -> list[_Job]:
    out: list[_Job] = []
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return out
        if item is not None:
            out.append(item)


def _death(proc: subprocess.Popen[bytes]) -> str:
    """How the child ended, for the error a caller sees."""
    try:
        code = proc.wait(2.0)
    except subprocess.TimeoutExpired:
        return "its pipe closed while it still runs"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def worker_main(argv: list[str]) -> int:
    """The child: nice 10, die with the parent, import `preload`, then answer calls.

    Each call is a pickled (fn, args, kwargs); the answer a pickled (True, result) or
    (False, exception). EOF on the pipe (the parent shut down or died) ends the child."""
    fd, parent_pid, preload = int(argv[0]), int(argv[1]), argv[2]
    with contextlib.suppress(OSError):
        os.nice(10)
    die_with_parent(parent_pid)
    conn = Connection(fd)
    importlib.import_module(preload)
    conn.send_bytes(READY)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return 0
        try:
            fn, args, kwargs = pickle.loads(data)
            answer: tuple[bool, Any] = (True, fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            answer = (False, exc)
        try:
            out = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result or exception
            err = RuntimeError(f"analysis worker: cannot send back {type(exc).__name__}: {exc}")
            out = pickle.dumps((False, err))
        conn.send_bytes(out)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
