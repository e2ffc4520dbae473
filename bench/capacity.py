"""How many rollouts this machine holds: ramp concurrent, fully recorded rollouts against the
reference system until uplink lateness p99 passes 5 ms or a frame stalls, beside the bare
`websockets` echo ceiling on the same machine.

    python bench/capacity.py                          # default ramp 10 25 50 75 100 150 200
    python bench/capacity.py --steps 25 50 100 --seconds 6 --echo-steps 100 200 400
    python bench/capacity.py --steps 50 100 200 --seconds 10 --no-stop --floor-runs 3
    python bench/capacity.py --steps 25 50 --echo-steps 100 200 --loop asyncio uvloop
    python bench/capacity.py --steps 25 50 75 100 --workers 1 2 --sim-workers 2

Per step, in one run and side by side: N, pooled uplink send lateness p50/p99/max over every
frame of every rollout (chunks.jsonl: send time minus deadline, the rig's own stamps on the
shared clock), stalls, how many rollouts were `timing_valid` (rig.core.selfcheck), CPU per
stream-frame for the rig (this process: every thread, RUSAGE_SELF; the analysis worker is a
separate low-priority process, not counted) and for the reference system (`rig sim` in its
own process, utime+stime from /proc/PID/stat), each over the uplink frames of the step, and
the RSS growth of this process per rollout. `rig_steady_us_per_frame` is the same CPU over
the steady window only (every rollout streaming, half a second in from the last start and
before the first end: connects, set-up, rollout ends and analysis hand-offs left out), the
method of the floor client's figure; both are printed as ratios to the floor. The ramp stops
at the first step past the bound; `max rollouts` is the last step within it.

Two anchors. The floor (`--floor-steps`, default the steps of 50, 100 and 200 in the ramp):
bench/floorclient.py's best variant (one tick for all streams over websockets' sans-I/O
protocol, on uvloop where it is installed), a recording client written apart from rig, in a
child process right after the rig's step at the same N (steps the ramp did not reach run
after it), under the same SCHED_FIFO priority; its CPU per uplink frame is RUSAGE_SELF of that
child over its steady window, and the rig's CPU per stream-frame is printed as a ratio to it
at each N both have. It carries more downlink (a reply frame on every stream every 20 ms)
than a rollout. The bare echo (`--echo-steps`): N paced echo streams (20 ms frames of 640
bytes, absolute deadlines on the same timerfd clock) against a bare `websockets` echo server
in its own process: no recording, no analysis, no dialect, lateness only.

--loop asyncio uvloop runs every step (rig and anchor) once per event loop implementation,
alternating, in one run: the rig's ratio beside the anchor's (uvloop: the `uvloop` extra).
The reference system runs on `--sim-loop` (asyncio unless asked) for every step.

--workers 1 2 runs every step through the command line instead, `rig run tone.wav --repeat N
--concurrency N --workers W` in a child process, once per W, alternating, in one run: the
same rollouts (a WAV of the same tone turn) as the in-process rows. Its CPU per stream-frame
is RUSAGE_CHILDREN over the command: the parent, every worker and their analysis workers
(the in-process rows leave the analysis worker out), so compare CLI rows with CLI rows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any

import numpy as np
from cpustats import children_cpu_s, self_cpu_s, tree_cpu_s
from runstats import (
    RATE,
    lateness_summary_ms,
    rss_kb,
    steady_window,
    tone_specs,
    uplink_lateness_ms,
    uplink_send_ns,
)

from rig import realtime
from rig.clock.base import MonotonicClock
from rig.recordings.writer import RecordingWriter
from rig.runs.runner import Runner, RunnerSettings

FRAME_NS = 20_000_000
BOUND_P99_MS = 5.0


def rollout_figures(res: list[dict[str, Any]], late_ms: np.ndarray[Any, Any]) -> dict[str, Any]:
    """What a step's rows share: statuses, frames, pooled lateness, stalls, timing_valid."""
    late = lateness_summary_ms(late_ms)
    return {
        "statuses": dict(Counter(str(m.get("status", "error")) for m in res)),
        "frames": sum(int(m.get("uplink", {}).get("frames", 0)) for m in res),
        "p50_ms": late["p50"],
        "p99_ms": late["p99"],
        "max_ms": late["max"],
        "stalls": sum(int(m.get("uplink", {}).get("stalls", 0)) for m in res),
        "timing_valid": sum(m.get("timing_valid") is True for m in res),
    }


def start_proc(cmd: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    m = re.search(r"ws://\S+", proc.stdout.readline())
    if m is None:
        proc.kill()
        raise SystemExit(f"did not start: {cmd}")
    return proc, m.group(0)


#: writer modes side by side, CPU per frame: (batch window s, flush interval s, header every
#: N flushes) -- a write per record, a write per 10 ms batch (until 2026-12-02), the default
WRITERS = {
    "per-record": (0.0, 0.0, 1),  # every record written at once
    "flush-10ms": (0.01, 0.0, 10),  # the writer until 2026-12-02: every batch written
    "batched": (0.01, 0.1, 1),  # the default: 10 ms batches, a rollout written every 100 ms
}


def run_on(loop: str, coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """`asyncio.run` on the standard loop or on uvloop (one fresh loop per step either way)."""
    if loop == "asyncio":
        return asyncio.run(coro)
    import uvloop

    return uvloop.run(coro)


async def rig_step(
    url: str, sim_pid: int, n: int, seconds: float, out: str, rt: int, writer: str = "batched",
    tick: bool = True,
) -> dict[str, Any]:  # fmt: skip
    specs = tone_specs(url, n, seconds, "capacity", seconds + 30, tick)
    rss0 = rss_kb()
    peak = [rss0]

    cpu: list[tuple[int, float]] = []  # (shared clock, this process's CPU): the steady window

    async def watch() -> None:
        while True:
            peak[0] = max(peak[0], rss_kb())
            cpu.append((time.monotonic_ns(), self_cpu_s()))
            await asyncio.sleep(0.25)

    w = asyncio.create_task(watch())
    window_s, flush_every_s, header_every = WRITERS[writer]
    runner = Runner(
        out,
        RunnerSettings(concurrency=n, connect_concurrency=16, rt_priority=rt),
        writer=RecordingWriter(
            batch_window_s=window_s, flush_every_s=flush_every_s, header_every=header_every
        ),
    )
    cpu0, sim0 = self_cpu_s(), tree_cpu_s(sim_pid)
    result = await runner.run(specs)
    cpu1, sim1 = self_cpu_s(), tree_cpu_s(sim_pid)
    w.cancel()
    res = result["results"].values()
    frames = sum(int(r.get("uplink", {}).get("frames", 0)) for r in res)
    late = uplink_lateness_ms(result["run_dir"], list(result["results"]))
    steady = steady_window(uplink_send_ns(result["run_dir"], list(result["results"])), cpu)
    return {
        "n": n,
        "writer": writer,
        "tick": "on" if tick else "off",
        **rollout_figures(list(res), late),
        "invalid_why": dict(
            Counter(
                re.sub(r"[\d.]+", "#", why).split(" >")[0].split(" (")[0]
                for r in res
                for why in (r.get("rig_timing") or {}).get("reasons", [])
            )
        ),
        "rig_us_per_frame": round((cpu1 - cpu0) / frames * 1e6, 1) if frames else None,
        "rig_steady_us_per_frame": None if steady is None else steady["us_per_frame"],
        "steady_window_s": None if steady is None else steady["window_s"],
        "sim_us_per_frame": round((sim1 - sim0) / frames * 1e6, 1) if frames else None,
        "rss_mb_per_rollout": round((peak[0] - rss0) / 1024 / n, 2),
    }


def tone_wav(out: str, seconds: float) -> str:
    """The in-process rows' plan as a WAV file for `rig run`: 0.3 s of silence, the tone."""
    import soundfile as sf

    from rig.audio.source import tone

    x = np.concatenate([np.zeros(int(0.3 * RATE), np.int16), tone(300, seconds, RATE).pcm])
    path = os.path.join(out, "tone.wav")
    sf.write(path, x, RATE, subtype="PCM_16")
    return path


def cli_step(
    url: str, sim_pid: int, n: int, seconds: float, out: str, rt: int, workers: int
) -> dict[str, Any]:
    """One step through `rig run --workers W` in a child process (see the docstring)."""
    run_id = f"cli-w{workers}-n{n}-{len(os.listdir(out))}"
    cmd = [sys.executable, "-m", "rig", "run", tone_wav(out, seconds), "--target", url,
           "--out", out, "--run-id", run_id, "--headless", "--repeat", str(n),
           "--concurrency", str(n), "--connect-concurrency", "16", "--workers", str(workers),
           "--drain-quiet-s", "1", "--max-s", str(seconds + 30), "--probe-interval-s", "0.5",
           "--rt-priority", str(rt), "--progress-interval-s", "0"]  # fmt: skip
    cpu0, sim0 = children_cpu_s(), tree_cpu_s(sim_pid)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu1, sim1 = children_cpu_s(), tree_cpu_s(sim_pid)
    run_dir = os.path.join(out, run_id)
    if r.returncode not in (0, 3):
        raise SystemExit(f"rig run failed ({r.returncode}): {r.stderr[-2000:]}")
    res = []
    for rid in sorted(os.listdir(os.path.join(run_dir, "rollouts"))):
        with open(os.path.join(run_dir, "rollouts", rid, "metrics.json"), encoding="utf-8") as f:
            res.append(json.load(f))
    frames = sum(int(m.get("uplink", {}).get("frames", 0)) for m in res)
    x = uplink_lateness_ms(run_dir, [str(m["rollout_id"]) for m in res])
    return {
        "n": n,
        "writer": f"cli --workers {workers}",
        **rollout_figures(res, x),
        "rig_us_per_frame": round((cpu1 - cpu0) / frames * 1e6, 1) if frames else None,
        "sim_us_per_frame": round((sim1 - sim0) / frames * 1e6, 1) if frames else None,
    }


ECHO_SERVER = """
import asyncio, contextlib, websockets
async def echo(ws):
    with contextlib.suppress(websockets.ConnectionClosed):
        async for m in ws:
            await ws.send(m)
async def main():
    async with websockets.serve(echo, "127.0.0.1", 0, max_queue=None) as s:
        print("ws://127.0.0.1:%d" % s.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()
asyncio.run(main())
"""


async def echo_step(url: str, n: int, seconds: float, rt: int) -> dict[str, Any]:
    """N paced streams of 640-byte frames every 20 ms against the bare echo server."""
    import websockets

    clock = MonotonicClock()
    frames = int(seconds * 1e9 / FRAME_NS)
    late: list[int] = []
    payload = b"\0" * 640

    gate = asyncio.Semaphore(16)  # as the runner's connect gate

    async def connect() -> Any:
        async with gate:
            return await websockets.connect(url, max_queue=None, open_timeout=60)

    conns = await asyncio.gather(*(connect() for _ in range(n)))

    async def stream(k: int, ws: Any, t0: int) -> None:
        async def drain() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                async for _ in ws:
                    pass

        rx = asyncio.create_task(drain())
        for i in range(frames):
            due = t0 + k * FRAME_NS // n + i * FRAME_NS
            await clock.sleep_until(due)
            late.append(clock.now_ns() - due)
            await ws.send(payload)
        rx.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rx
        await ws.close()

    t0 = clock.now_ns() + 500_000_000
    # the same process settings a rig run gets: SCHED_FIFO for the loop, no full GC
    with realtime.scheduling(rt), realtime.streaming():
        await asyncio.gather(*(stream(k, ws, t0) for k, ws in enumerate(conns)))
    x = np.asarray(late, dtype=np.float64) / 1e6
    return {
        "n": n,
        "frames": int(x.size),
        "p50_ms": round(float(np.percentile(x, 50)), 3),
        "p99_ms": round(float(np.percentile(x, 99)), 3),
        "stalls": int((x > 20.0).sum()),
    }


FLOOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floorclient.py")


def floor_steps(ns: list[int], args: argparse.Namespace, out: str) -> list[dict[str, Any]]:
    """The floor client's best variant at each N, in its own process (its RUSAGE_SELF is then
    its own alone: no thread of this process left from a rig step counts)."""
    path = os.path.join(out, f"floor-{len(os.listdir(out))}.json")
    cmd = [sys.executable, FLOOR, "--streams", *map(str, ns), "--seconds", str(args.seconds),
           "--variant", "best", "--runs", str(args.floor_runs),
           "--rt-priority", str(args.rt_priority), "--json", path]  # fmt: skip
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"floor client failed ({r.returncode}): {r.stderr[-2000:]}")
    with open(path, encoding="utf-8") as f:
        rows: list[dict[str, Any]] = json.load(f)
    for row in rows:
        row["n"] = row.pop("streams")
        print(json.dumps({"floor": row}), flush=True)
    return rows


def floor_ratios(rig_rows: list[dict[str, Any]], floor_rows: list[dict[str, Any]]) -> list[str]:
    """Rig CPU per stream-frame / the floor's at each N both have (the floor's mean over its
    runs; its range beside it)."""
    out = []
    for n in sorted({r["n"] for r in floor_rows}):
        fl = [r["us_per_frame"] for r in floor_rows if r["n"] == n and r.get("us_per_frame")]
        rigs = [r for r in rig_rows if r["n"] == n and r.get("rig_us_per_frame")]
        if not fl or not rigs:
            continue
        f = sum(fl) / len(fl)
        spread = f" ({min(fl):g}-{max(fl):g} over {len(fl)} runs)" if len(fl) > 1 else ""
        for r in rigs:
            what = ", ".join(str(r[k]) for k in ("writer", "loop", "tick") if r.get(k))
            rig = r["rig_us_per_frame"]
            line = f"  n={n} ({what}): whole run {rig} / {f:.1f}{spread} us = {rig / f:.2f}"
            steady = r.get("rig_steady_us_per_frame")
            if steady:  # the floor's own method: the window where every stream is up
                line += f"; steady window {steady} / {f:.1f} us = {steady / f:.2f}"
            out.append(line)
    return out


def within(row: dict[str, Any]) -> bool:
    p99 = row.get("p99_ms")
    return p99 is not None and p99 <= BOUND_P99_MS and row.get("stalls", 1) == 0


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 25, 50, 75, 100, 150, 200])
    ap.add_argument("--echo-steps", type=int, nargs="+", default=[50, 100, 200, 300, 400])
    ap.add_argument(
        "--floor-steps", type=int, nargs="*", default=None,
        help="floor client at these N (default: 50 100 200 where in --steps; none: off)",
    )  # fmt: skip
    ap.add_argument("--floor-runs", type=int, default=1, help="floor runs per N (a range)")
    ap.add_argument("--seconds", type=float, default=6.0, help="user turn per rollout")
    ap.add_argument("--rt-priority", type=int, default=3)
    ap.add_argument("--no-stop", action="store_true", help="run every step past the bound")
    ap.add_argument(
        "--writer", nargs="+", choices=sorted(WRITERS), default=["batched"],
        help="writer modes, alternated at every step (side by side)",
    )  # fmt: skip
    ap.add_argument("--sim-workers", type=int, default=1, help="rig sim --workers N")
    ap.add_argument(
        "--sim-loop", choices=["asyncio", "uvloop"], default="asyncio",
        help="rig sim --loop (the reference system's event loop, the same for every step)",
    )  # fmt: skip
    ap.add_argument(
        "--workers", type=int, nargs="+", default=None,
        help="run each step through `rig run --workers W`, once per W, alternating",
    )  # fmt: skip
    ap.add_argument(
        "--loop", nargs="+", choices=["asyncio", "uvloop"], default=["asyncio"],
        help="event loops, alternated at every step (rig and echo anchor, side by side)",
    )  # fmt: skip
    ap.add_argument(
        "--tick", nargs="+", choices=["on", "off"], default=["on"],
        help="uplink frames from the loop's shared tick (on) or a wake-up per stream (off), "
        "alternated at every step (side by side)",
    )  # fmt: skip
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, {platform.platform()}, "
          f"Python {platform.python_version()}; load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    sim, url = start_proc([sys.executable, "-m", "rig", "sim", "--port", "0", "--reply-s", "2",
                           "--workers", str(args.sim_workers),
                           "--loop", args.sim_loop])  # fmt: skip
    echo, echo_url = start_proc([sys.executable, "-c", ECHO_SERVER])
    rig_rows: list[dict[str, Any]] = []
    echo_rows: list[dict[str, Any]] = []
    floor_rows: list[dict[str, Any]] = []
    floor_ns = args.floor_steps
    if floor_ns is None:
        floor_ns = [n for n in (50, 100, 200) if n in args.steps]
    try:
        with tempfile.TemporaryDirectory() as out:
            for n in args.steps:
                rows = []
                for workers in args.workers or []:
                    row = cli_step(url, sim.pid, n, args.seconds, out, args.rt_priority, workers)
                    row["load1"] = round(os.getloadavg()[0], 2)
                    rows.append(row)
                    print(json.dumps({"rig": row}), flush=True)
                combos = itertools.product(args.writer, args.loop, args.tick)
                for w, lp, tk in combos if not args.workers else ():
                    step = rig_step(
                        url, sim.pid, n, args.seconds, out, args.rt_priority, w, tk == "on"
                    )
                    row = {**run_on(lp, step), "loop": lp}
                    row["load1"] = round(os.getloadavg()[0], 2)
                    rows.append(row)
                    print(json.dumps({"rig": row}), flush=True)
                rig_rows += rows
                if n in floor_ns:
                    floor_rows += floor_steps([n], args, out)
                if not any(within(r) for r in rows) and not args.no_stop:
                    break
            if rest := [n for n in floor_ns if n not in {r["n"] for r in floor_rows}]:
                floor_rows += floor_steps(rest, args, out)
        for n in args.echo_steps:
            rows = []
            for lp in args.loop:
                step = echo_step(echo_url, n, args.seconds, args.rt_priority)
                row = {**run_on(lp, step), "loop": lp, "load1": round(os.getloadavg()[0], 2)}
                rows.append(row)
                print(json.dumps({"echo": row}), flush=True)
            echo_rows += rows
            if not any(within(r) for r in rows) and not args.no_stop:
                break
    finally:
        for p in (sim, echo):
            p.terminate()
            p.wait(10)
    ok = [r["n"] for r in rig_rows if within(r)]
    eok = [r["n"] for r in echo_rows if within(r)]
    best, ebest = max(ok) if ok else 0, max(eok) if eok else 0
    print(f"\nmax rollouts within p99 <= {BOUND_P99_MS} ms and no stall: {best} (rig, "
          f"recorded) vs {ebest} (bare echo)")  # fmt: skip
    print(table(rig_rows, ["n", "writer", "loop", "tick", "p50_ms", "p99_ms", "max_ms", "stalls",
                           "timing_valid", "rig_us_per_frame", "rig_steady_us_per_frame",
                           "sim_us_per_frame", "rss_mb_per_rollout", "load1"]))  # fmt: skip
    print()
    print(table(echo_rows, ["n", "loop", "p50_ms", "p99_ms", "stalls", "load1"]))
    if floor_rows:
        print(f"\nfloor client ({floor_rows[0]['variant']}, bench/floorclient.py):")
        print(table(floor_rows, ["n", "variant", "us_per_frame", "p50_ms", "p99_ms", "max_ms",
                                 "stalls", "frames_down", "server_us_per_frame", "rt",
                                 "load1"]))  # fmt: skip
        print("\nrig CPU per stream-frame / floor client's (same N, same run):")
        print("\n".join(floor_ratios(rig_rows, floor_rows)) or "  (no rig step at a floor N)")
    if len(args.tick) > 1:
        print("\nrig CPU per stream-frame, tick on / off (same step):")
        for n in sorted({r["n"] for r in rig_rows}):
            by = {r["tick"]: r for r in rig_rows if r["n"] == n and r["loop"] == args.loop[0]}
            on, off = by.get("on", {}), by.get("off", {})
            if on.get("rig_us_per_frame") and off.get("rig_us_per_frame"):
                a, b = on["rig_us_per_frame"], off["rig_us_per_frame"]
                print(f"  n={n}: {a} / {b} us = {a / b:.2f}")
    if len(args.loop) > 1:
        print("\nrig CPU per stream-frame, uvloop / asyncio (same step):")
        for n in sorted({r["n"] for r in rig_rows}):
            by = {r["loop"]: r for r in rig_rows if r["n"] == n and r["writer"] == args.writer[0]}
            a, u = by.get("asyncio", {}), by.get("uvloop", {})
            if a.get("rig_us_per_frame") and u.get("rig_us_per_frame"):
                ua, aa = u["rig_us_per_frame"], a["rig_us_per_frame"]
                print(f"  n={n}: {ua} / {aa} us = {ua / aa:.2f}")


if __name__ == "__main__":
    main()
