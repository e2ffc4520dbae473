"""CPU per input chunk of `rig sim`'s engine (rig.sim.engine, rig.sim.selfecho), the paths a
fleet of timing scenarios takes: 20 ms chunks (320 samples at 16 kHz), a 440 Hz reply
playing, loud noise-like user input that holds no echo (no --echo), and the same with
echo. The on_audio rows feed noise that the noise-floor gate keeps under it (the quiet
path: most chunks of a fleet).

    /work/bin/t .venv/bin/python bench/sim_chunk.py

Prints the CPU time (process time) per call over many calls after a warm-up (timeit, best
of several repeats), in microseconds, less the cost of making the inputs.
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable

import numpy as np

from rig.sim.engine import SimConfig, SimEngine
from rig.sim.selfecho import OwnEchoCanceller

RATE, N = 16_000, 320
NS_CHUNK = N * 1_000_000_000 // RATE


def _tone(k: int) -> np.ndarray:
    t = (np.arange(N) + k * N) / RATE
    return (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)


def _canceller(hearable: bool, echo: bool, found: bool = False) -> Callable[[], object]:
    """`found`: an echo was heard (and cancelled) before this stretch without one."""
    rng = np.random.default_rng(0)
    c = OwnEchoCanceller(RATE)
    state = {"k": 0, "echo": echo or found}

    def step() -> object:
        k = state["k"]
        state["k"] = k + 1
        t = k * NS_CHUNK
        ref = _tone(k)
        c.played(t - NS_CHUNK, ref)  # said over the 20 ms before this chunk arrives
        if state["echo"]:
            x = (_tone(k - 3).astype(np.float64) * 0.3).astype(np.int16)
        else:
            x = (rng.standard_normal(N) * 3000).astype(np.int16)
        return c.clean(x, t, hearable=hearable)

    for _ in range(200):  # a full history
        step()
    state["echo"] = echo
    for _ in range(10):
        step()
    return step


def _engine(canceller: bool) -> Callable[[], object]:
    rng = np.random.default_rng(0)
    eng = SimEngine(SimConfig(self_echo_sensitive=not canceller))
    state = {"k": 0}

    def step() -> object:
        k = state["k"]
        state["k"] = k + 1
        t = k * NS_CHUNK
        eng.said(t - NS_CHUNK, _tone(k))
        return eng.on_audio((rng.standard_normal(N) * 3000).astype(np.int16), t)

    for _ in range(200):
        step()
    return step


def _gate() -> Callable[[], object]:
    rng = np.random.default_rng(0)
    eng = SimEngine(SimConfig())
    blocks = [(rng.standard_normal(160) * 300).astype(np.int16) for _ in range(64)]
    state = {"k": 0}

    def step() -> object:
        state["k"] += 1
        return eng._gate(blocks[state["k"] % 64])

    for _ in range(200):
        step()
    return step


def _gate_scalar() -> Callable[[], object]:
    """The gate's per-block step on a block's (sum of squares, peak), as on_audio runs it."""
    rng = np.random.default_rng(0)
    eng = SimEngine(SimConfig())
    stats = []
    for _ in range(64):
        x = (rng.standard_normal(160) * 300).astype(np.int64)
        stats.append((int(x @ x), int(np.abs(x).max())))
    state = {"k": 0}

    def step() -> object:
        state["k"] += 1
        sq, peak = stats[state["k"] % 64]
        return eng._gate_of(sq, peak, 160)

    for _ in range(200):
        step()
    return step


def _input_cost() -> Callable[[], object]:
    """The makings of one chunk's input, to subtract: noise and the reply chunk."""
    rng = np.random.default_rng(0)
    state = {"k": 0}

    def step() -> object:
        state["k"] += 1
        return _tone(state["k"]), (rng.standard_normal(N) * 3000).astype(np.int16)

    return step


def us_per_call(fn: Callable[[], object], number: int = 300, repeat: int = 7) -> float:
    t = timeit.repeat(fn, timer=time.process_time, number=number, repeat=repeat)
    return min(t) / number * 1e6


def main() -> None:
    base = us_per_call(_input_cost())
    rows = {
        "clean, quiet chunk (hearable=False)": _canceller(False, False),
        "clean, loud chunk, no echo (failed fit)": _canceller(True, False),
        "  the same once an echo was found": _canceller(True, False, found=True),
        "clean, loud chunk, echo (good fit)": _canceller(True, True),
        "SimEngine.on_audio, canceller on": _engine(True),
        "SimEngine.on_audio, canceller off": _engine(False),
    }
    print(f"us per 20 ms chunk (input making, {base:.1f} us, subtracted)")
    for name, fn in rows.items():
        print(f"  {name:42s} {us_per_call(fn) - base:8.1f}")
    print(f"  {'SimEngine._gate, one 10 ms block':42s} {us_per_call(_gate()):8.1f}")
    print(f"  {'  of which the scalar step (_gate_of)':42s} {us_per_call(_gate_scalar()):8.1f}")


if __name__ == "__main__":
    main()
