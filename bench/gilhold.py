"""Does a per-frame level measurement hand the GIL away? A worker thread measures frame levels
in a loop while the main thread runs pure Python; a call that drops and retakes the GIL waits
for the main thread each time, so its calls per second collapse. Side by side in one run:
`sum_squares` (element loops up to GIL_HELD_MAX samples, the writer's path since the twelfth
pass on #32) and the dot product it replaced, at 320, 480 and 960 samples.

    python bench/gilhold.py [--seconds 0.7]
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
import timeit
from collections.abc import Callable

import numpy as np

from rig.audio.pcm import sum_squares


def dot_sum(pcm: np.ndarray) -> float:
    x = pcm.astype(np.float64)
    return float(x.dot(x))


def contended(fn: Callable[[], float], seconds: float) -> tuple[float, float]:
    """(worker calls/s, main loop iterations/s) while both run."""
    stop = time.monotonic() + seconds
    calls = [0]

    def worker() -> None:
        while time.monotonic() < stop:
            fn()
            calls[0] += 1

    t = threading.Thread(target=worker)
    t.start()
    spins = 0
    while time.monotonic() < stop:
        spins += 1
    t.join()
    return calls[0] / seconds, spins / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.7)
    args = ap.parse_args()
    print(f"load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| samples | method | alone us/call | worker calls/s beside a busy thread |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in (320, 480, 960):
        pcm = (rng.standard_normal(n) * 3000).astype(np.int16)
        for name, f in (("sum_squares", sum_squares), ("dot", dot_sum)):
            call = functools.partial(f, pcm)
            alone = timeit.timeit(call, number=50_000) / 50_000 * 1e6
            calls, _ = contended(call, args.seconds)
            print(f"| {n} | {name} | {alone:.2f} | {calls:,.0f} |")
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
