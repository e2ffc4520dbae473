"""Child processes die with their parent, however the parent dies (SIGKILL included).

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
import multiprocessing
import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1


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


def analysis_pool(preload: str) -> concurrent.futures.ProcessPoolExecutor:
    """The analysis worker: one spawned process at nice 10 that dies with us and imports
    `preload` (the module whose functions it will run) as it starts, so the analysis stack is
    loaded before the first rollout ends, not on the first call."""
    return concurrent.futures.ProcessPoolExecutor(
        1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_analysis_worker_init,
        initargs=(os.getpid(), preload),
    )


def _analysis_worker_init(parent_pid: int, preload: str) -> None:
    """Runs first in the analysis worker: low priority, die with the parent, then preload."""
    with contextlib.suppress(OSError):
        os.nice(10)
    die_with_parent(parent_pid)
    importlib.import_module(preload)
