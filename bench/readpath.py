"""What receiving costs the rig's loop per message, by read path: uvloop reading in C (the
loop's stamps), uvloop with the rig reading the socket itself for the kernel's stamps
(rig.transports.kreader), and asyncio's selector loop with the kernel's stamps
(rig.transports.kstamp). N rig client connections (StampedConnection, as a rollout's) each
receive one 20 ms reply frame every 20 ms from a paced server in its own process (one tick
for all streams); the client's CPU (RUSAGE_SELF, every thread) over the steady window,
divided by the messages received in it. Variants alternated in rounds in one run; the
median and the range over rounds, µs per message, with the load average before and after.

    python bench/readpath.py [--streams 200] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

VARIANTS = ("uvloop, libuv reads", "uvloop, own reads + kernel", "asyncio + kernel")
FRAME_BYTES = 640  # 20 ms of 16 kHz PCM16
TICK_S = 0.020

SERVER = r"""
import asyncio, sys, time
import uvloop
from websockets.asyncio.server import serve

FRAME = b"\x01" * int(sys.argv[1])
conns = set()

async def handler(ws):
    conns.add(ws)
    try:
        await ws.wait_closed()
    finally:
        conns.discard(ws)

async def main():
    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        nxt = time.monotonic()
        while True:
            nxt += 0.020
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            for ws in list(conns):
                if ws.protocol.state.name == "OPEN":
                    ws.protocol.send_binary(FRAME)
                    ws.send_data()

uvloop.run(main())
"""


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def one_round(port: int, variant: str, streams: int, seconds: float) -> float:
    from websockets.asyncio.client import connect

    from rig.clock.base import MonotonicClock
    from rig.transports.websocket import StampedConnection, stamping

    clock = MonotonicClock()
    conns: list[Any] = []
    for _ in range(streams):
        ws = await connect(
            f"ws://127.0.0.1:{port}",
            create_connection=stamping(StampedConnection, clock),
            compression=None,
            ping_interval=None,
            max_queue=None,
        )
        if variant != VARIANTS[0]:
            assert ws.kernel_stamps(), variant
        conns.append(ws)

    async def drain(ws: Any) -> None:
        async for _ in ws:
            ws.stamps.clear()
            ws.exact.clear()

    tasks = [asyncio.create_task(drain(ws)) for ws in conns]
    await asyncio.sleep(1.0)  # every stream receiving
    m0 = sum(ws.kernel.messages for ws in conns)
    c0 = cpu_s()
    await asyncio.sleep(seconds)
    c1 = cpu_s()
    m1 = sum(ws.kernel.messages for ws in conns)
    for ws in conns:
        await ws.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if m1 == m0:
        raise SystemExit(f"readpath: {variant}: no message received in {seconds} s")
    return 1e6 * (c1 - c0) / (m1 - m0)


def run(variant: str, port: int, streams: int, seconds: float) -> float:
    coro = one_round(port, variant, streams, seconds)
    if variant.startswith("uvloop"):
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from rig.transports import kstamp

    if not kstamp.supported():
        sys.exit("readpath: kernel stamps need Linux")
    kstamp.keep_on()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(FRAME_BYTES)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        load0 = os.getloadavg()[0]
        got: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                got[variant].append(run(variant, port, args.streams, args.seconds))
                time.sleep(0.5)
        load1 = os.getloadavg()[0]
    finally:
        server.terminate()
        server.wait(5)
    print(f"{args.streams} streams, one {FRAME_BYTES}-byte frame each per {TICK_S * 1e3:.0f} ms")
    print("| read path | µs per message, median | range |")
    print("|---|---|---|")
    for variant, us in got.items():
        print(f"| {variant} | {statistics.median(us):.1f} | {min(us):.1f}-{max(us):.1f} |")
    print(f"load average {load0:.2f} -> {load1:.2f}")


if __name__ == "__main__":
    main()
