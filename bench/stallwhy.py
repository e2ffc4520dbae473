"""Whose time was it? For each late uplink frame of a rollout: what the rig's loop thread was
doing and who held the CPUs, from a system-wide scheduler trace on the rig's clock.

    perf record -a -k CLOCK_MONOTONIC -e sched:sched_switch -e sched:sched_wakeup \\
        -o sched.data -- <the run or the test>
    python bench/stallwhy.py sched.data RUN/rollouts/ID [--truth truth.jsonl] [--late-ms 4]

The loop thread is found from the data: the SCHED_FIFO thread switched in closest before
each uplink send (median wake-to-send ~0.2 ms). With `--truth` (`rig sim --truth-log`) the
sim's loop is found the same way from its receive stamps and named. Per late frame (window:
2 ms before its deadline to its send): the loop thread's time running, runnable (waiting for
a CPU) and asleep (timer, GIL, I/O), and who ran on the CPUs, by process and priority. The
summary pools the frames. docs/pacing.md ("A flagged rollout: whose time was it?") has the
2026-12-01 result.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import re
import subprocess
from typing import Any

SWITCH = re.compile(
    r"^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=.*? "
    r"prev_pid=(\d+) prev_prio=(\d+) prev_state=(\S+) ==> next_comm=.*? next_pid=(\d+) "
    r"next_prio=(\d+)"
)
WAKEUP = re.compile(r"^\s*\d+/\d+\s+\[\d+\]\s+([\d.]+):\s+sched:sched_wakeup: .*? pid=(\d+) ")
WINDOW_BEFORE_NS = 2_000_000


class Trace:
    def __init__(self, perf_file: str) -> None:
        out = subprocess.run(
            ["perf", "script", "-i", perf_file, "-F", "pid,tid,cpu,time,event,trace"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        #: (t_ns, cpu, prev_tid, prev_state, next_tid, next_prio)
        self.switches: list[tuple[int, int, int, str, int, int]] = []
        self.wakeups: list[tuple[int, int]] = []
        self.switched_in: dict[int, list[int]] = collections.defaultdict(list)
        for line in out.splitlines():
            if m := SWITCH.match(line):
                t = round(float(m[4]) * 1e9)
                nxt, prio = int(m[8]), int(m[9])
                self.switches.append((t, int(m[3]), int(m[5]), m[7], nxt, prio))
                if prio < 100:  # real time: kernel prio 99 - rtprio
                    self.switched_in[nxt].append(t)
            elif m := WAKEUP.match(line):
                self.wakeups.append((round(float(m[1]) * 1e9), int(m[2])))

    def closest_before(self, stamps: list[int]) -> int:
        """The real-time thread switched in closest before most of `stamps` (median)."""
        best: tuple[float, int] = (float("inf"), 0)
        for tid, ts in self.switched_in.items():
            d = sorted(
                t - ts[i] if (i := bisect.bisect_right(ts, t) - 1) >= 0 else 10**15 for t in stamps
            )
            best = min(best, (d[len(d) // 2], tid))
        return best[1]

    def loop_state_ns(self, tid: int, lo: int, hi: int) -> collections.Counter[str]:
        """Time `tid` spent running / runnable / asleep in [lo, hi]."""
        rows = sorted(
            [(s[0], "out", s[3]) for s in self.switches if s[2] == tid and lo - 10**8 <= s[0] <= hi]
            + [(s[0], "in", "") for s in self.switches if s[4] == tid and lo - 10**8 <= s[0] <= hi]
            + [(w[0], "wake", "") for w in self.wakeups if w[1] == tid and lo - 10**8 <= w[0] <= hi]
        )
        acc: collections.Counter[str] = collections.Counter()
        state, since = None, lo
        for t, kind, prev_state in rows:
            if t >= lo and state is not None:
                acc[state] += t - max(since, lo)
            if kind == "out":
                state = "runnable" if prev_state.startswith("R") else "asleep"
            elif kind == "in":
                state = "running"
            elif state == "asleep":
                state = "runnable"
            since = t
        if state is not None:
            acc[state] += hi - max(since, lo)
        return acc

    def cpu_holders_ns(self, lo: int, hi: int, names: dict[int, str]) -> collections.Counter[str]:
        """CPU time in [lo, hi] by holder: a named thread, or by priority class."""
        acc: collections.Counter[str] = collections.Counter()
        cur: dict[int, tuple[int, str]] = {}
        for t, cpu, _, _, nxt, prio in self.switches:
            if t > hi:
                break
            if cpu in cur and t > lo:
                start, who = cur[cpu]
                acc[who] += t - max(start, lo)
            if nxt in names:
                who = names[nxt]
            elif nxt == 0:
                who = "idle"
            elif prio < 100:
                who = f"other SCHED_FIFO {99 - prio}"
            else:
                who = "other normal"
            cur[cpu] = (t, who)
        for start, who in cur.values():
            acc[who] += hi - max(start, lo)
        return acc


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _shares(c: collections.Counter[str]) -> str:
    total = sum(c.values()) or 1
    return ", ".join(f"{k} {100 * v / total:.0f}% ({v / 1e6:.1f} ms)" for k, v in c.most_common())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("perf_data")
    ap.add_argument("rollout_dir")
    ap.add_argument("--truth", help="the sim's --truth-log of this rollout (names its loop)")
    ap.add_argument("--late-ms", type=float, default=4.0)
    args = ap.parse_args()
    trace = Trace(args.perf_data)
    ups = [
        c for c in _read_jsonl(os.path.join(args.rollout_dir, "chunks.jsonl")) if c["dir"] == "up"
    ]
    loop = trace.closest_before([c["t_ns"] for c in ups])
    names = {loop: "rig loop"}
    if args.truth:
        recv = [t["t_ns"] for t in _read_jsonl(args.truth) if t["event"] == "recv_chunk"]
        names[trace.closest_before(recv)] = "sim loop"
    print(f"loop thread {loop}; " + ", ".join(f"{v} = {k}" for k, v in names.items()))
    states: collections.Counter[str] = collections.Counter()
    holders: collections.Counter[str] = collections.Counter()
    late = [c for c in ups if c["lateness_ns"] > args.late_ms * 1e6]
    for c in late:
        lo, hi = c["t_sched_ns"] - WINDOW_BEFORE_NS, c["t_ns"]
        st, ho = trace.loop_state_ns(loop, lo, hi), trace.cpu_holders_ns(lo, hi, names)
        states.update(st)
        holders.update(ho)
        print(f"frame {c['seq']} {c['lateness_ns'] / 1e6:.1f} ms late: loop {_shares(st)}")
        print(f"    cpus: {_shares(ho)}")
    print(f"{len(late)} frames > {args.late_ms:g} ms late")
    print(f"  loop thread: {_shares(states)}")
    print(f"  cpus held by: {_shares(holders)}")


if __name__ == "__main__":
    main()
