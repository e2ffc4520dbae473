"""N concurrent rollouts against the reference system (in its own process): send lateness
and memory per rollout.

    python bench/concurrency.py --n 10 25 50 --seconds 8
    python bench/concurrency.py --n 50 --hogs 2 --rt-priority 0 3   # under CPU contention
    python bench/concurrency.py --n 10 --waves 3 --asr off tiny.en off tiny.en  # ASR on/off
    python bench/concurrency.py --n 3 --seconds 5 --rt-priority 3 --hogs 3 --helpers 0 1 --rounds 5

Each rollout plays a tone turn of --seconds (one reply, then drain). Reports, per N: p50/p99/
max uplink send lateness over all frames of all rollouts (target p99 < 5 ms), stalls, and
the RSS growth of this process during the run divided by N (memory per rollout; the
analysis worker is a separate process and not counted). --hogs K starts K busy processes
(normal priority) for the whole run, the way a build or the system under test on the same box
takes the cores; --rt-priority compares normal scheduling (0) with SCHED_FIFO for the loop
thread (rig/realtime.py) side by side, alternating in one run. --asr compares runs without
and with word-level ASR (a faster-whisper model name or path, run in the analysis worker
after each rollout); with --waves W, N*W rollouts run N at a time, so the worker's ASR of
finished rollouts overlaps the streaming of later ones (what could move pacing).
--helpers compares the priority of the process's other Python threads while the loop is real
time (rig.realtime.HELPER_PRIORITY: 0 leaves them at normal scheduling, the old behaviour, 1
is the default), alternating in one run, --rounds times; each line also gives the event
loop's lag (rig.loopwatch, p99 and max over the rollouts) and how many rollouts the rig
flagged for its own timing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from typing import Any

from runstats import lateness_summary_ms, rss_kb, tone_specs, uplink_lateness_ms

from rig import realtime
from rig.runs.runner import Runner, RunnerSettings


async def one_run(
    url: str,
    n: int,
    seconds: float,
    out: str,
    rt_priority: int,
    asr_model: str | None = None,
    waves: int = 1,
) -> dict[str, Any]:
    specs = tone_specs(url, n * waves, seconds, "bench", seconds + 20)
    rss0 = rss_kb()
    peak = [rss0]

    async def watch() -> None:
        while True:
            peak[0] = max(peak[0], rss_kb())
            await asyncio.sleep(0.25)

    w = asyncio.create_task(watch())
    runner = Runner(
        out,
        RunnerSettings(
            concurrency=n, connect_concurrency=16, rt_priority=rt_priority, asr_model=asr_model
        ),
    )
    result = await runner.run(specs)
    w.cancel()
    stalls = sum(r.get("uplink", {}).get("stalls", 0) for r in result["results"].values())
    loops = [((r.get("rig_timing") or {}).get("loop") or {}) for r in result["results"].values()]
    lag_p99 = [x["lag_p99_ms"] for x in loops if x.get("lag_p99_ms") is not None]
    lag_max = [x["lag_max_ms"] for x in loops if x.get("lag_max_ms") is not None]
    x = uplink_lateness_ms(result["run_dir"], list(result["results"]))
    late = lateness_summary_ms(x)
    return {
        "n": n,
        "rollouts": n * waves,
        "asr": asr_model or "off",
        "asr_on": sum(
            1 for r in result["results"].values() if (r.get("timing") or {}).get("asr") == "on"
        ),
        "scheduling": read_manifest(result["run_dir"])["scheduling"],
        "statuses": result["status_counts"],
        "frames": int(x.size),
        "lateness_p50_ms": late["p50"],
        "lateness_p99_ms": late["p99"],
        "lateness_max_ms": late["max"],
        "stalls": stalls,
        "loop_lag_p99_ms": max(lag_p99, default=None),
        "loop_lag_max_ms": max(lag_max, default=None),
        "timing_invalid": sum(1 for r in result["results"].values() if not r.get("timing_valid")),
        "rss_per_rollout_mb": round((peak[0] - rss0) / 1024 / n, 2),
    }


def read_manifest(run_dir: str) -> dict[str, Any]:
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as f:
        return dict(json.load(f))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10, 25, 50])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--hogs", type=int, default=0, help="busy processes competing for the CPU")
    ap.add_argument("--rt-priority", type=int, nargs="+", default=[0])
    ap.add_argument("--asr", nargs="+", default=["off"], help="off or a model, alternating")
    ap.add_argument("--waves", type=int, default=1, help="N*WAVES rollouts, N at a time")
    ap.add_argument(
        "--helpers",
        type=int,
        nargs="+",
        default=[realtime.HELPER_PRIORITY],
        help="SCHED_FIFO priority of the other Python threads (0: normal), alternating",
    )
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole comparison")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    sim = subprocess.Popen(
        [sys.executable, "-m", "rig", "sim", "--port", "0", "--reply-s", "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sim.stdout is not None
    m = re.search(r"ws://\S+", sim.stdout.readline())
    assert m
    url = m.group(0)
    print(f"machine: {platform.machine()} {os.cpu_count()} cpu, {platform.platform()}")
    try:
        with tempfile.TemporaryDirectory() as out:
            for _ in range(args.rounds):
                for n, prio, asr, helpers in itertools.product(
                    args.n, args.rt_priority, args.asr, args.helpers
                ):
                    model = None if asr == "off" else asr
                    realtime.HELPER_PRIORITY = helpers
                    r = asyncio.run(one_run(url, n, args.seconds, out, prio, model, args.waves))
                    row = {"hogs": args.hogs, "helpers": helpers, "load": os.getloadavg()[0], **r}
                    print(json.dumps(row), flush=True)
    finally:
        for h in hogs:
            h.kill()
        sim.terminate()
        sim.wait(10)


if __name__ == "__main__":
    main()
