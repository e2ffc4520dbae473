"""Pacing benchmark: send lateness and drift of uplink streams over real loopback WebSockets.

Compares, in one run on one machine, for 1 and N concurrent streams:
  deadline+timerfd   rig's pacer: absolute deadlines, woken by a Linux timerfd (the default)
  deadline+asyncio   absolute deadlines, woken by asyncio.sleep (ms-rounded selector timeouts)
  naive sleep        `await asyncio.sleep(frame)` after each send (what many harnesses do)
Lateness is measured against the ideal schedule t0 + k*frame for all three. Drift is the
slope of lateness over the run, extrapolated to one hour of audio.

    python bench/pacing.py --seconds 60 --streams 1 50 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
from websockets.asyncio.server import serve

from rig.clock.base import MonotonicClock
from rig.core.pacer import Pacer, PacerConfig
from rig.dialects.rawpcm import RawPcmDialect
from rig.transports.websocket import WebSocketTransport

FRAME_MS = 20.0
RATE = 16_000


async def _sink(ws) -> None:  # type: ignore[no-untyped-def]
    await ws.recv()
    await ws.send(json.dumps({"type": "ready", "sample_rate": RATE}))
    async for _ in ws:
        pass


async def stream(url: str, method: str, seconds: float, t0_ns: int) -> list[int]:
    clock = MonotonicClock(precise=(method == "deadline+timerfd"))
    t = WebSocketTransport(url, RawPcmDialect(RATE), clock)
    await t.open()
    cfg = PacerConfig.from_ms(RATE, FRAME_MS)
    pacer = Pacer(cfg, t0_ns)
    frame = np.zeros(cfg.frame_samples, np.int16)
    n = int(seconds * 1000 / FRAME_MS)
    late: list[int] = []
    if method == "naive sleep":
        await clock.sleep_until(t0_ns)
        for k in range(n):
            sent = await t.send_audio(frame, k, pacer.deadline_ns(k))
            late.append(sent - pacer.deadline_ns(k))
            await asyncio.sleep(FRAME_MS / 1000)
    else:
        for k in range(n):
            d = pacer.deadline_ns(k)
            await clock.sleep_until(d)
            sent = await t.send_audio(frame, k, d)
            late.append(sent - d)
    await t.close()
    return late


def summarize(lates: list[list[int]], seconds: float) -> dict[str, float]:
    allv = np.concatenate([np.asarray(x, dtype=np.float64) for x in lates]) / 1e6
    drifts = []
    for x in lates:
        a = np.asarray(x, dtype=np.float64) / 1e6
        k = np.arange(a.size) * FRAME_MS / 1000
        slope_ms_per_s = np.polyfit(k, a, 1)[0] if a.size > 2 else 0.0
        drifts.append(slope_ms_per_s * 3600)
    return {
        "p50_ms": round(float(np.percentile(allv, 50)), 3),
        "p99_ms": round(float(np.percentile(allv, 99)), 3),
        "max_ms": round(float(allv.max()), 3),
        "final_ms": round(float(np.mean([x[-1] for x in lates]) / 1e6), 3),
        "drift_ms_per_hour": round(float(np.median(drifts)), 1),
        "frames": int(allv.size),
    }


async def run_case(url: str, method: str, n_streams: int, seconds: float) -> dict[str, float]:
    t0 = time.monotonic_ns() + 300_000_000
    # stagger streams across one frame, as independent rollouts would be
    offsets = [int(i * FRAME_MS * 1e6 / max(1, n_streams)) for i in range(n_streams)]
    lates = await asyncio.gather(*(stream(url, method, seconds, t0 + o) for o in offsets))
    return summarize(list(lates), seconds)


def machine() -> str:
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), ""
        )
    except OSError:
        pass
    cpu = model or platform.processor()
    py = sys.version.split()[0]
    return f"{cpu}, {os.cpu_count()} cores, Python {py}, {platform.system()} {platform.release()}"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 50])
    ap.add_argument(
        "--methods", nargs="+", default=["deadline+timerfd", "deadline+asyncio", "naive sleep"]
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    server = await serve(_sink, "127.0.0.1", 0, compression=None)
    url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}"
    results = []
    print(f"machine: {machine()}; {args.seconds:.0f} s of 20 ms frames per stream", flush=True)
    head = ("streams", "method", "p50 ms", "p99 ms", "max ms", "drift ms/h")
    print(f"{head[0]:>7} {head[1]:<18} {head[2]:>8} {head[3]:>8} {head[4]:>8} {head[5]:>11}")
    for n in args.streams:
        for method in args.methods:
            r = await run_case(url, method, n, args.seconds)
            results.append({"streams": n, "method": method, **r})
            print(
                f"{n:>7} {method:<18} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['max_ms']:>8.3f} "
                f"{r['drift_ms_per_hour']:>11.1f}",
                flush=True,
            )
    server.close()
    if args.json:
        with open(args.json, "w") as f:  # noqa: ASYNC230 - after the measurement
            json.dump(
                {"machine": machine(), "seconds": args.seconds, "results": results}, f, indent=2
            )


if __name__ == "__main__":
    asyncio.run(main())
