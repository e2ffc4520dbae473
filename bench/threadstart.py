"""What starting a thread costs a real-time loop: `Thread.start()` from a SCHED_FIFO thread
waits until the new thread (normal priority: SCHED_RESET_ON_FORK) has run, so on a busy
machine the loop waits for it to get a CPU. Why rig.realtime.IoThreads starts its threads
before the streams.

    python bench/threadstart.py --hogs 0 4 --starts 200

Per hog count (busy processes at normal priority), in one run: p50/p99/max of the time the
loop thread spent in `Thread.start()` (perf_counter, around the call), one start every 10 ms.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import threading
import time

from rig import realtime


def measure(hogs: int, starts: int, rt: int) -> dict[str, float]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    time.sleep(0.3)
    took: list[float] = []
    try:
        with realtime.scheduling(rt), realtime.streaming():
            for _ in range(starts):
                t = threading.Thread(target=lambda: None)
                t0 = time.perf_counter_ns()
                t.start()
                took.append((time.perf_counter_ns() - t0) / 1e6)
                t.join()
                time.sleep(0.01)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    took.sort()
    n = len(took)
    return {"p50_ms": took[n // 2], "p99_ms": took[min(n - 1, int(n * 0.99))], "max_ms": took[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hogs", type=int, nargs="+", default=[0, 4])
    ap.add_argument("--starts", type=int, default=200)
    ap.add_argument("--rt-priority", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, {platform.platform()}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    for hogs in args.hogs:
        r = measure(hogs, args.starts, args.rt_priority)
        print(f"hogs {hogs}: Thread.start() on the loop p50 {r['p50_ms']:.3f} ms, "
              f"p99 {r['p99_ms']:.3f} ms, max {r['max_ms']:.3f} ms "
              f"({args.starts} starts)")  # fmt: skip


if __name__ == "__main__":
    main()
