"""Process CPU readings shared by the benchmarks (no rig imports: the floor client uses it).

CPU per frame is process CPU over a window divided by the frames of that window: this
process (every thread, RUSAGE_SELF), another process from /proc (utime + stime, every
thread), a process and its children, or every waited-for descendant.
"""

from __future__ import annotations

import contextlib
import os
import resource

TICK_S = os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu_s(pid: int) -> float:
    """utime + stime of another process, all its threads."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


def tree_cpu_s(pid: int) -> float:
    """CPU of a process and its children (`rig sim --workers N`)."""
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids += [int(x) for x in f.read().split()]
    return proc_cpu_s(pid) + sum(proc_cpu_s(k) for k in kids)


def children_cpu_s() -> float:
    """CPU of every waited-for descendant (a `rig run` child, its workers and theirs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
