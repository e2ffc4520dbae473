"""CPU per input chunk of `rig sim`'s engine (rig.sim.engine, rig.sim.selfecho), the paths a
fleet of timing scenarios takes: 20 ms chunks (320 samples at 16 kHz), a 440 Hz reply
playing, loud noise-like user input that holds no echo (no --echo), and the same with
echo. The on_audio rows feed noise that the noise-floor gate keeps under it (the quiet
path: most chunks of a fleet).

    python bench/sim_chunk.py [--old]

`--old` runs the same rows on the engine and canceller as they were before their shortcuts
(tests/sim/engine_v1.py and selfecho_v1.py, the tests' oracles), for a before/after on the
same machine at the same load (run the two one after the other, a few times).

Prints the CPU time (process time) per call over many calls after a warm-up (timeit, best
of several repeats), in microseconds, less the cost of making the inputs.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

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


def conversation_us() -> float:
    """CPU per chunk over 30 s of a timing-like conversation: questions answered by the
    tone reply, a barge-in 1 s into one, backchannels over another (rig/data/timing)."""
    import soundfile as sf

    from rig.scenarios.builtin import data_path

    names = ("question", "interrupt", "mhm", "okay")
    clips = [sf.read(data_path("timing", f"{n}.wav"), dtype="int16")[0] for n in names]
    user = np.zeros(RATE * 30, np.int16)
    for s, i in [(0.5, 0), (4.3, 1), (10.0, 0), (13.6, 2), (14.8, 3), (20.0, 0), (23.5, 1)]:
        j = int(s * RATE)
        user[j : j + clips[i].size] = clips[i][: user.size - j]
    eng = SimEngine(SimConfig())
    t0 = time.process_time()
    for k in range(user.size // N):
        t = (k + 1) * NS_CHUNK
        for e in eng.poll(t)[0]:
            eng.said(t, e.pcm)
        eng.on_audio(user[k * N : (k + 1) * N], t)
    return (time.process_time() - t0) / (user.size // N) * 1e6


def us_per_call(fn: Callable[[], object], number: int = 300, repeat: int = 7) -> float:
    t = timeit.repeat(fn, timer=time.process_time, number=number, repeat=repeat)
    return min(t) / number * 1e6


def _use_old() -> None:
    """The engine and canceller as they were before their shortcuts (the tests' oracles)."""
    global OwnEchoCanceller, SimEngine
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.sim import engine_v1, selfecho_v1

    engine_v1.OwnEchoCanceller = selfecho_v1.OwnEchoCanceller
    OwnEchoCanceller, SimEngine = selfecho_v1.OwnEchoCanceller, engine_v1.SimEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", action="store_true", help="the code before (tests/sim/*_v1.py)")
    old = ap.parse_args().old
    if old:
        _use_old()
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
    if not old:
        print(f"  {'  of which the scalar step':42s} {us_per_call(_gate_scalar()):8.1f}")
    conv = min(conversation_us() for _ in range(3))
    print(f"  {'a timing-like conversation, per chunk':42s} {conv:8.1f}")


if __name__ == "__main__":
    main()
