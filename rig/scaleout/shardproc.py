"""The process a shard runs in under an engine: `python -m rig.scaleout.shardproc PPID
MODULE ARGS` (the module: rig.runs.worker, which reads the run's config on stdin).

Why a launcher: the shard's audio loop must not share a process with Ray's threads, so the
Ray task starts the shard's rig as a child process, and that child must die with the task's
worker however it dies (a node lost, a worker killed): it arms the kernel's parent-death
signal (rig.childproc), checks the parent is still the one that started it, then execs
`python -m MODULE ARGS` in place (the signal stays armed across exec; the pid stays the same).
"""

from __future__ import annotations

import os
import sys

from rig.childproc import set_parent_death_signal


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python -m rig.scaleout.shardproc PARENT_PID MODULE ARGS...")
    set_parent_death_signal()
    if os.getppid() != int(argv[0]):  # the parent died before the signal was armed
        os._exit(1)
    os.execv(sys.executable, [sys.executable, "-m", *argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
