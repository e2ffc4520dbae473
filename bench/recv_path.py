"""The rig's receive path per downlink message: `receive()` (websockets' `recv()` in a task)
against `receive_into` (each message handed over inside `data_received`), side by side.

A server process on loopback sends rig-pcm audio messages (20 ms, 16 kHz), one every
`--gap-ms`, so that each socket read holds one message as in a rollout; the client reads
them through rig's WebSocketTransport and RawPcmDialect with an empty handler. Per variant:
the client's CPU per message (RUSAGE_SELF over the stream: its loop thread and anything
else it runs). Variants alternate, `--runs` times each.

    python bench/recv_path.py [--messages 3000] [--gap-ms 1] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

SERVER = r"""
import asyncio, sys, time
import numpy as np
from websockets.asyncio.server import serve
from rig.protocol import rawpcm

N, GAP = int(sys.argv[1]), float(sys.argv[2]) / 1000

async def handler(ws):
    await ws.recv()
    await ws.send(rawpcm.encode_text("ready", sample_rate=16000))
    await asyncio.sleep(0.2)
    pcm = np.full(320, 1000, dtype=np.int16)
    t = time.monotonic()
    for k in range(N):
        await ws.send(rawpcm.encode_audio(pcm, k, k * 20.0))
        t += GAP
        await asyncio.sleep(max(0.0, t - time.monotonic()))
    await ws.close()

async def main():
    async with serve(handler, "127.0.0.1", 0) as s:
        print(s.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def one(port: int, how: str) -> dict[str, float]:
    from rig.clock.base import MonotonicClock
    from rig.dialects.rawpcm import RawPcmDialect
    from rig.transports.base import Transport
    from rig.transports.websocket import WebSocketTransport

    t = WebSocketTransport(f"ws://127.0.0.1:{port}/", RawPcmDialect(16_000), MonotonicClock())
    await t.open()
    n = 0

    def handle(item: object) -> None:
        nonlocal n
        n += 1

    c0, w0 = _cpu_s(), time.perf_counter()
    if how == "recv":
        await Transport.receive_into(t, handle)  # the awaited path: recv() in this task
    else:
        await t.receive_into(handle)
    c1, w1 = _cpu_s(), time.perf_counter()
    await t.close()
    return {"messages": n, "us_per_message": (c1 - c0) / max(1, n) * 1e6, "wall_s": w1 - w0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, Python "
          f"{platform.python_version()}; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    rows: dict[str, list[float]] = {"recv": [], "data_received": []}
    for _ in range(args.runs):
        for how in rows:
            srv = subprocess.Popen(
                [sys.executable, "-c", SERVER, str(args.messages), str(args.gap_ms)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert srv.stdout is not None
                port = int(srv.stdout.readline())
                r = asyncio.run(one(port, how))
            finally:
                srv.kill()
                srv.wait()
            rows[how].append(r["us_per_message"])
            print(f"  {how:14s} {r['messages']} messages, {r['us_per_message']:.1f} us each")
    print("client CPU per message, median (min-max):")
    for how, xs in rows.items():
        print(f"  {how:14s} {np.median(xs):6.1f} ({min(xs):.1f}-{max(xs):.1f}) us")
    ratio = np.median(rows["data_received"]) / np.median(rows["recv"])
    print(f"  data_received / recv: {ratio:.2f}; load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
