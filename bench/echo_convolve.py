"""Cost per uplink frame of the echo condition's frame hook (rig.echo.path.EchoPath.apply):
no room, a 0.3 s room and a 1 s room, equal rates and 24 kHz playback read at 16 kHz.

    python bench/echo_convolve.py

Prints the median and p99 of the hook's CPU time per 20 ms frame (thread time, 2000 frames
after 200 warm-up frames), and the share of the frame period it takes.
"""

from __future__ import annotations

import time

import numpy as np

from rig.core.records import SystemAudio
from rig.echo.path import EchoPath
from rig.echo.spec import EchoSpec

RATE, N = 16_000, 320


def measure(rir_s: float, down_rate: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    rir = None if rir_s == 0 else rng.standard_normal(int(rir_s * RATE)) * 0.01
    path = EchoPath(EchoSpec(erl_db=20, delay_ms=40), RATE, N, rir)
    frame = np.zeros(N, np.int16)
    down_n = down_rate // 50
    costs = []
    for k in range(2200):
        path.hear(
            SystemAudio(
                down_rate, k * down_n, (rng.standard_normal(down_n) * 3000).astype(np.int16)
            )
        )
        t = time.thread_time_ns()
        path.apply(frame, k * N)
        path.take()
        costs.append(time.thread_time_ns() - t)
    c = np.array(costs[200:]) / 1000.0
    return float(np.median(c)), float(np.percentile(c, 99))


def main() -> None:
    print("echo frame hook, CPU us per 20 ms frame (median, p99)")
    for rir_s in (0.0, 0.3, 1.0):
        for down in (RATE, 24_000):
            med, p99 = measure(rir_s, down)
            print(
                f"  room {rir_s:.1f} s, playback {down} Hz: {med:7.1f} {p99:7.1f} us "
                f"({100 * med / 20_000:.2f}% of the frame)"
            )


if __name__ == "__main__":
    main()
