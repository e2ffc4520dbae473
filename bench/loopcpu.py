"""Thread CPU of the audio loop's pieces in a real run, where py-spy cannot see (docs/pacing.md).

On uvloop most of the loop thread's samples land in `Runner.run` for py-spy (the loop is C,
and much of what it calls back shows no Python frame), and `perf` sees the interpreter, not
the functions. This runs `rig run` against `rig sim` in this process with chosen methods
wrapped: each wrapped call adds the loop thread's CPU (`time.thread_time_ns`, exact on
Linux) it took, over a window in the run's steady state; the thread's whole CPU over the
same window is read from its own clock. A piece's figure includes what it calls, and the
wrappers of what it calls: wrap few pieces at a time, nested ones only to split a parent.
Each wrapper costs about two clock reads (printed as `wrapper us/call`, measured hot; cold
in a run it costs more), so compare trees with the same pieces wrapped, not one piece
across wrappings.

    python bench/loopcpu.py --n 100 --pieces serve send plain sentpcm
    python bench/loopcpu.py --n 100 --pieces timer serve recv probe path
    PYTHONPATH=/tmp/other-tree python bench/loopcpu.py --n 100 --pieces serve   # A/B
    python bench/loopcpu.py --side sim --n 100 --pieces simread direct onaudio emit
    python bench/loopcpu.py --side sim --n 200 --scenario builtin:timing --repeat 40 \
        --warm 5 --window 4 --pieces direct onaudio clean emit   # the reply phase's peak

`--side sim` turns it round: `rig sim` runs in this process (its loop thread measured, with
the SIM_PIECES wrapped) and `rig run` in its own; frames are the sim's input chunks then.

`--scenario` plays a scenario (`builtin:timing`: questions, replies, barge-ins, noise) instead
of a tone turn per rollout, `--repeat` times with N at once; not every stream then sends in
the window, so the frames are counted by the piece that sees each one (`serve`, or `onaudio`
with `--side sim`), which must be wrapped.

Per piece: calls in the window, µs of loop-thread CPU per uplink frame (the window's frames:
the `serve` calls where it is wrapped, else N x frames per second x window) and per call.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

#: piece -> (module, class, method): the loop thread's per-frame and periodic work
PIECES: dict[str, tuple[str, str, str]] = {
    "timer": ("rig.clock.timer", "PreciseTimer", "_on_ready"),  # a wake: every due tick
    "serve": ("rig.sessiontick", "Tick", "serve"),  # one stream's frame from the tick
    "plain": ("rig.core.uplink", "Uplink", "plain_pcm"),  # the frame's samples
    "observe": ("rig.core.listener", "Listener", "observe"),
    "send": ("rig.sessionlink", "Link", "send_pcm_now"),  # encode, frame, socket write
    "sentpcm": ("rig.session", "Session", "_sent_pcm"),  # lateness, records to the writer
    "after": ("rig.sessiontick", "Tick", "_after"),  # playback release, next deadline
    "recv": ("rig.transports.wsstamps", "ArrivalStamps", "data_received"),  # a socket read
    "decode": ("rig.dialects.rawpcm", "RawPcmDialect", "decode"),
    "onevent": ("rig.core.listener", "Listener", "on_event"),
    "pong": ("rig.net.pathsample", "PathSampler", "pong"),
    "probe": ("rig.sessionchores", "Chores", "_probe"),  # a clock probe written
    "path": ("rig.sessionchores", "Chores", "_path"),  # TCP state read, a ping written
}
#: the same for the reference system (`--side sim`): its per-input-chunk and per-reply work
SIM_PIECES: dict[str, tuple[str, str, str]] = {
    "simtimer": ("rig.clock.timer", "PreciseTimer", "_on_ready"),  # a wake of its tick
    "simread": ("websockets.asyncio.connection", "Connection", "data_received"),  # a read
    "wsparse": ("websockets.protocol", "Protocol", "receive_data"),  # frames parsed, unmasked
    "direct": ("rig.sim.server", "_Session", "_direct"),  # one message: decode, handle
    "simdecode": ("rig.sim.server", "_Session", "_decode"),
    "arrived": ("rig.sim.server", "_Session", "_arrived"),  # truth record, the engine
    "onaudio": ("rig.sim.engine", "SimEngine", "on_audio"),  # the model's chunk
    "clean": ("rig.sim.selfecho", "OwnEchoCanceller", "clean"),  # its own echo removed
    "text": ("rig.sim.server", "_Session", "_on_text"),  # a probe or ping answered
    "emit": ("rig.sim.server", "_Session", "_emit_due"),  # reply chunks due
    "sendlater": ("rig.sim.wsdown", "Downlink", "send_later"),  # a reply framed and written
    "sent": ("rig.sim.server", "_Session", "_sent"),  # its truth record, echo reference
}
FRAMES_PER_S = 50  # 20 ms frames

_tt = time.thread_time_ns


class Pieces:
    """Wrapped methods and what they took while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.acc: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)
        acc = self.acc

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            t0 = _tt()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = acc[name]
                entry[0] += _tt() - t0
                entry[1] += 1

        setattr(owner, attr, timed)

    def wrapper_us(self) -> float:
        """One wrapped empty call, hot (the floor of what a wrapper adds)."""

        class _Empty:
            def m(self) -> None:
                return None

        self.wrap(_Empty, "m", "_cal")
        self.on, e = True, _Empty()
        for _ in range(20_000):
            e.m()
        self.on = False
        ns, n = self.acc.pop("_cal")
        return ns / n / 1e3


def window(pieces: Pieces, warm_s: float, span_s: float, out: dict[str, Any]) -> None:
    """Sample the main thread's CPU and the pieces over [warm_s, warm_s + span_s]."""
    clock = time.pthread_getcpuclockid(threading.main_thread().ident or 0)
    time.sleep(warm_s)
    pieces.acc.clear()
    t0, w0 = time.clock_gettime_ns(clock), time.monotonic_ns()
    pieces.on = True
    time.sleep(span_s)
    pieces.on = False
    out["loop_ns"] = time.clock_gettime_ns(clock) - t0
    out["wall_ns"] = time.monotonic_ns() - w0
    out["acc"] = {k: list(v) for k, v in pieces.acc.items()}
    out["load"] = os.getloadavg()


def tone_wav(path: str, seconds: float) -> None:
    import numpy as np
    import soundfile as sf

    from rig.audio.source import tone

    x = np.concatenate([np.zeros(4800, np.int16), tone(300, seconds, 16_000).pcm])
    sf.write(path, x, 16_000, subtype="PCM_16")


def report(args: argparse.Namespace, res: dict[str, Any], cal_us: float, load0: Any) -> None:
    acc = res.get("acc", {})
    span_s = res["wall_ns"] / 1e9
    counted = "serve" if args.side == "rig" else "onaudio"
    frames = acc[counted][1] if counted in acc else round(args.n * FRAMES_PER_S * span_s)
    load = f"load {load0[0]:.2f} -> {res['load'][0]:.2f}"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, {platform.platform()}, "
          f"Python {platform.python_version()}; {load}")  # fmt: skip
    print(f"side={args.side} n={args.n} loop={args.loop}; window {span_s:.1f} s, "
          f"{frames} uplink frames; "
          f"wrapper {cal_us:.2f} us/call (hot)")  # fmt: skip
    print(f"loop thread: {res['loop_ns'] / 1e3 / max(frames, 1):.1f} us/frame "
          f"({100 * res['loop_ns'] / res['wall_ns']:.0f} % of a core)")  # fmt: skip
    print("| piece | calls/s | us/frame | us/call |")
    print("|---|---|---|---|")
    for name, (ns, calls) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
        print(f"| {name} | {calls / span_s:.0f} | {ns / 1e3 / max(frames, 1):.2f} | "
              f"{ns / 1e3 / max(calls, 1):.2f} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100, help="rollouts at once")
    ap.add_argument("--side", choices=["rig", "sim"], default="rig", help="measured process")
    ap.add_argument(
        "--pieces", nargs="*", choices=sorted(PIECES | SIM_PIECES),
        help="wrapped methods (default: serve, or onaudio with --side sim: the frames)",
    )  # fmt: skip
    ap.add_argument("--seconds", type=float, default=20.0, help="user turn per rollout")
    ap.add_argument("--warm", type=float, default=8.0, help="s from the start to the window")
    ap.add_argument("--window", type=float, default=6.0, help="s measured")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="uvloop")
    ap.add_argument("--port", type=int, default=8799)
    ap.add_argument("--rt-priority", type=int, default=3)
    ap.add_argument(
        "--scenario", default=None,
        help="a scenario instead of the tone turn (e.g. builtin:timing); frames counted by "
        "the wrapped `serve` (rig side) or `onaudio` (sim side)",
    )  # fmt: skip
    ap.add_argument("--repeat", type=int, default=None, help="with --scenario: --repeat (N)")
    args = ap.parse_args()
    if args.scenario is None and args.repeat is not None:
        ap.error("--repeat goes with --scenario (the tone turn runs once per rollout, N at once)")
    if args.scenario is None and args.warm + args.window > args.seconds:
        ap.error("--warm + --window must fall inside --seconds")
    table = PIECES if args.side == "rig" else SIM_PIECES
    counted = "serve" if args.side == "rig" else "onaudio"
    if args.pieces is None:
        args.pieces = [counted]
    if wrong := [name for name in args.pieces if name not in table]:
        ap.error(f"not pieces of the {args.side} side: {', '.join(wrong)}")
    if args.scenario is not None and counted not in args.pieces:
        ap.error(f"--scenario counts the frames by `{counted}`: wrap it (--pieces {counted} ...)")
    pieces = Pieces()
    for name in args.pieces:
        module, cls, attr = table[name]
        pieces.wrap(getattr(importlib.import_module(module), cls), attr, name)
    cal_us = pieces.wrapper_us()
    load0 = os.getloadavg()
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rig-loopcpu-") as tmp:
        wav = args.scenario
        if wav is None:
            wav = os.path.join(tmp, "tone.wav")
            tone_wav(wav, args.seconds)
        (measure_rig if args.side == "rig" else measure_sim)(args, pieces, wav, tmp, res)
    report(args, res, cal_us, load0)


def measure_rig(
    args: argparse.Namespace, pieces: Pieces, wav: str, tmp: str, res: dict[str, Any]
) -> None:
    """`rig sim` in its own process, `rig run` in this thread (the loop thread measured)."""
    sim = subprocess.Popen(
        [sys.executable, "-m", "rig", *sim_argv(args)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(2.0)
        watcher = start_window(args, pieces, res)
        in_this_thread(run_argv(args, wav, tmp), ok=(0, 3))  # 3: rollouts flagged
        watcher.join()
    finally:
        sim.terminate()
        sim.wait()


def measure_sim(
    args: argparse.Namespace, pieces: Pieces, wav: str, tmp: str, res: dict[str, Any]
) -> None:
    """`rig sim` in this thread (the loop thread measured), `rig run` in its own process,
    started once the sim listens; the sim is stopped (SIGTERM, its own handler) after."""
    failed: list[str] = []

    def drive() -> None:
        time.sleep(2.0)
        watcher = start_window(args, pieces, res)
        code = subprocess.call(
            [sys.executable, "-m", "rig", *run_argv(args, wav, tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        watcher.join()
        if code not in (0, 3):
            failed.append(f"rig run exited {code}")
        os.kill(os.getpid(), signal.SIGTERM)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    in_this_thread(sim_argv(args), ok=(0,))
    driver.join()
    if failed:
        raise SystemExit(failed[0])


def start_window(args: argparse.Namespace, pieces: Pieces, res: dict[str, Any]) -> threading.Thread:
    """The measuring window (`window`) in a thread of its own, from now."""
    watcher = threading.Thread(
        target=window, args=(pieces, args.warm, args.window, res), daemon=True
    )
    watcher.start()
    return watcher


def sim_argv(args: argparse.Namespace) -> list[str]:
    return ["sim", "--port", str(args.port), "--loop", args.loop,
            "--rt-priority", str(args.rt_priority)]  # fmt: skip


def run_argv(args: argparse.Namespace, wav: str, out: str) -> list[str]:
    """The tone turn (`wav`), or `--scenario` with its own drains and caps."""
    common = ["run", wav, "--target", f"ws://127.0.0.1:{args.port}", "--out", out,
              "--run-id", "loopcpu", "--headless", "--concurrency", str(args.n),
              "--connect-concurrency", "16", "--workers", "1", "--probe-interval-s", "0.5",
              "--rt-priority", str(args.rt_priority), "--progress-interval-s", "0",
              "--loop", args.loop]  # fmt: skip
    if getattr(args, "scenario", None) is not None:
        return [*common, "--repeat", str(args.repeat or args.n)]
    return [*common, "--repeat", str(args.n), "--drain-quiet-s", "1",
            "--max-s", str(args.seconds + 30)]  # fmt: skip


def in_this_thread(argv: list[str], ok: tuple[int, ...]) -> None:
    """A rig command in this thread (the loop thread the window measures), output silenced."""
    from rig.cli import main as rig_main

    with open(os.devnull, "w") as null:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = null
        try:
            code = rig_main(argv)
        finally:
            sys.stdout, sys.stderr = old_out, old_err
    if code not in ok:
        raise SystemExit(f"rig {argv[0]} exited {code}")


if __name__ == "__main__":
    main()
