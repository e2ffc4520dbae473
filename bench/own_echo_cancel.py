"""Cost per capture block of `--cancel-own-echo` on the device transport's receive path
(rig.echo.livecancel.CaptureCanceller: reference ring, SpeexDSP MDF, ERLE bookkeeping), for
filters covering 10 ms (a cable or JACK: the calibrated response's ring x 1.5 + 10 ms), 50,
100 and 300 ms (rooms), at 48 kHz in 256-sample blocks (one JACK period, 5.33 ms).

    python bench/own_echo_cancel.py

Prints the median and p99 of the CPU time (thread time) per 256-sample block over 2000
blocks after 200 warm-up blocks, and the share of the block period it takes.
"""

from __future__ import annotations

import time

import numpy as np

from rig.echo.livecancel import CaptureCanceller

RATE, BLOCK = 48_000, 256


def measure(tail_ms: float) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    n = 2200 * BLOCK
    play = (rng.standard_normal(n + 4800) * 3000).astype(np.int16)
    echo = (play[:n].astype(np.float64) * 0.5).astype(np.int16)  # 100 ms late, -6 dB
    c = CaptureCanceller(RATE, round(tail_ms * RATE / 1000), 0.25)
    c.align(-4800 + 96)
    costs = []
    for k in range(0, n, BLOCK):
        c.played(k + 4800, play[k + 4800 : k + 4800 + BLOCK])
        t = time.thread_time_ns()
        c.captured(k, echo[k : k + BLOCK])
        costs.append(time.thread_time_ns() - t)
    us = np.array(costs[200:]) / 1000.0
    return float(np.median(us)), float(np.percentile(us, 99))


def main() -> None:
    period_us = BLOCK / RATE * 1e6
    print(f"own-echo canceller, CPU us per {BLOCK}-sample block at {RATE} Hz (median, p99)")
    for tail_ms in (10.0, 50.0, 100.0, 300.0):
        med, p99 = measure(tail_ms)
        print(
            f"  filter {tail_ms:5.0f} ms: {med:7.1f} {p99:7.1f} us "
            f"({100 * med / period_us:.2f}% of the block)"
        )


if __name__ == "__main__":
    main()
