"""What held the event loop? Runs a `rig` command in this process with a sampler thread that
reads the loop thread's Python stack every `--every-ms`, then prints the loop's busy
stretches longer than `--min-ms` with the stacks seen in them, most frequent first.

    python bench/loopstretch.py [--min-ms 3] [--every-ms 0.5] [--json FILE] -- \\
        run builtin:timing --repeat 3 --concurrency 200 --headless --target ws://...

Why not py-spy: a profile pools the whole run, so a burst of 10 ms once per turn
disappears among the steady ticks; here each stretch is kept apart, with its time since
the first one. The sampler asks for SCHED_FIFO 20 (above the rig's loop thread at 3) so
that it reads the stack while the loop runs; without the right it says so and samples at
normal priority (coarser). A stretch is a run of samples whose innermost frame is not the
loop's idle wait (the selector's `select`, or uvloop's `run`, which shows no Python frame
while it waits); it is as long as its first to its last sample, so it can be up to one
interval short. Runs a single process only: use `--workers 1` (the default for a target on
this machine) or the samples miss the workers. docs/pacing.md, twelfth pass on #32, has
what it found.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

#: innermost frames (file:function) of a loop that is waiting, not working
IDLE = frozenset(
    {
        "selectors.py:select",
        "runners.py:run",
        "base_events.py:run_forever",
        "base_events.py:run_until_complete",
        "base_events.py:_run_once",
        "__init__.py:run",  # uvloop.run
    }
)


class Sampler:
    """The loop thread's stack every `every_s`, as indices into `stacks`."""

    def __init__(self, ident: int, every_s: float, depth: int = 40) -> None:
        self.ident, self.every_s, self.depth = ident, every_s, depth
        self.samples: list[tuple[int, int]] = []  # (monotonic ns, stack index)
        self.stacks: dict[str, int] = {}
        self.priority = "SCHED_FIFO 20"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loopstretch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _key(self, frame: FrameType | None) -> int:
        parts: list[str] = []
        while frame is not None and len(parts) < self.depth:
            code = frame.f_code
            parts.append(f"{os.path.basename(code.co_filename)}:{code.co_name}")
            frame = frame.f_back
        return self.stacks.setdefault(";".join(reversed(parts)), len(self.stacks))

    def _run(self) -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
        except OSError as exc:
            self.priority = f"normal ({exc.strerror})"
        frames, now, wait = sys._current_frames, time.monotonic_ns, self._stop.wait
        while not wait(self.every_s):
            frame = frames().get(self.ident)
            if frame is not None:
                self.samples.append((now(), self._key(frame)))


def stretches(sampler: Sampler, min_ms: float, top: int) -> list[dict[str, Any]]:
    """The busy stretches of at least `min_ms`, each with its `top` stacks."""
    names = {i: s for s, i in sampler.stacks.items()}
    idle = {i for i, s in names.items() if s.rsplit(";", 1)[-1] in IDLE}
    out: list[dict[str, Any]] = []
    cur: list[Any] | None = None  # [first ns, last ns, Counter of stacks]
    for t_ns, k in [*sampler.samples, (0, -1)]:  # -1: the end, which closes a stretch
        if k == -1 or k in idle:
            if cur is not None and (cur[1] - cur[0]) / 1e6 >= min_ms:
                stacks = [[names[i], n] for i, n in cur[2].most_common(top)]
                out.append({"t0_ns": cur[0], "ms": (cur[1] - cur[0]) / 1e6, "stacks": stacks})
            cur = None
            continue
        if cur is None:
            cur = [t_ns, t_ns, collections.Counter()]
        cur[1] = t_ns
        cur[2][k] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-ms", type=float, default=3.0, help="shortest stretch shown")
    ap.add_argument("--every-ms", type=float, default=0.5, help="sampling interval")
    ap.add_argument("--top", type=int, default=6, help="stacks shown per stretch")
    ap.add_argument("--json", help="also write the stretches here")
    ap.add_argument("rig_args", nargs=argparse.REMAINDER, help="-- then the rig command")
    args = ap.parse_args()
    rig_args = args.rig_args[1:] if args.rig_args[:1] == ["--"] else args.rig_args
    if not rig_args:
        ap.error("give the rig command after --, e.g. -- run builtin:timing ...")
    from rig.cli import main as rig_main

    sampler = Sampler(threading.get_ident(), args.every_ms / 1000)
    sampler.start()
    try:
        rc = rig_main(rig_args)
    finally:
        sampler.stop()
    found = stretches(sampler, args.min_ms, args.top)
    t0 = found[0]["t0_ns"] if found else 0
    print(f"\nloopstretch: {len(sampler.samples)} samples every {args.every_ms} ms "
          f"({sampler.priority}); {len(found)} busy stretches >= {args.min_ms} ms")  # fmt: skip
    for s in found:
        print(f"--- +{(s['t0_ns'] - t0) / 1e9:.3f} s  {s['ms']:.1f} ms")
        for stack, n in s["stacks"]:
            print(f"  {n:4d}  {' > '.join(stack.split(';')[-8:])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"priority": sampler.priority, "stretches": found}, f)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
