"""What measuring costs the proxy's forwarding: the metadata-only proxy of before (#22's
starting point, loaded from git) against the measuring proxy, metadata only and with
`--record-audio`, side by side in one run.

    python bench/proxy.py [--streams 4] [--seconds 10] [--rounds 3]

Setup: an echo system in its own process (every message straight back), each proxy variant
in its own process in front of it (SCHED_FIFO off for all: the same footing), and the bench
itself as the clients: `--streams` rig-pcm connections, each sending a 20 ms frame (16 kHz,
rig1 framing) every 20 ms on absolute deadlines. Per variant and round:

  rtt      a frame's round trip as the client sees it (send -> its echo back), p50 / p99;
           `direct` (no proxy) is the anchor, so a variant's added delay is rtt - direct
  fwd      the proxy's own forwarding delay (socket arrival of a message's last byte ->
           handed to the other side), p50 / p99, from the proxy's own records
  cpu      the proxy process's CPU time (utime + stime) per forwarded message

Variants run one after another within a round, rounds interleave; ratios are against the
`before` variant of the same round. Prints the machine and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rig.protocol import rawpcm  # noqa: E402

BEFORE_COMMIT = "9b3dc7d"
FRAME = 320  # 20 ms at 16 kHz
VARIANTS = ("direct", "before", "measure", "measure+audio")


# --- the child processes ---------------------------------------------------------------------


def _serve_echo() -> None:
    from websockets.asyncio.server import serve

    async def echo(ws: Any) -> None:
        async for m in ws:
            await ws.send(m)

    async def main() -> None:
        async with serve(echo, "127.0.0.1", 0, compression=None, max_size=None) as s:
            print(f"ws://127.0.0.1:{s.sockets[0].getsockname()[1]}", flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())


def _old_proxy_module() -> types.ModuleType:
    """rig/proxy.py as it was before #22 (metadata only), straight from git."""
    src = subprocess.run(
        ["git", "-C", ROOT, "show", f"{BEFORE_COMMIT}:rig/proxy.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    mod = types.ModuleType("rig_proxy_before")
    sys.modules[mod.__name__] = mod
    exec(compile(src, "rig_proxy_before.py", "exec"), mod.__dict__)  # noqa: S102 - our own code
    return mod


def _serve_proxy(variant: str, upstream: str, out: str) -> None:
    async def main() -> None:
        if variant == "before":
            proxy: Any = _old_proxy_module().RecordingProxy(upstream, out)
        else:
            from rig.proxy import RecordingProxy

            proxy = RecordingProxy(upstream, out, record_audio=variant == "measure+audio")
        print(await proxy.start(), flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await proxy.stop()
        print("done", flush=True)

    asyncio.run(main())


def _spawn(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("ws://"):
        proc.kill()
        raise SystemExit(f"child {args} did not start: {url!r}")
    return proc, url


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the clients -----------------------------------------------------------------------------


async def _stream(url: str, seconds: float, offset_s: float) -> list[int]:
    from websockets.asyncio.client import connect

    pcm = (np.sin(np.arange(FRAME) / 5) * 5000).astype(np.int16)
    rtts: list[int] = []
    sent: dict[int, int] = {}
    async with connect(url, compression=None, ping_interval=None) as ws:
        await ws.send(rawpcm.hello(16_000))
        await ws.recv()

        async def receive() -> None:
            async for m in ws:
                if isinstance(m, bytes):
                    t = time.monotonic_ns()
                    seq = rawpcm.decode_audio(m).seq
                    rtts.append(t - sent.pop(seq))

        rx = asyncio.create_task(receive())
        t0 = time.monotonic() + 0.2 + offset_s
        n = int(seconds * 50)
        for k in range(n):
            await asyncio.sleep(max(0.0, t0 + k * 0.02 - time.monotonic()))
            sent[k] = time.monotonic_ns()
            await ws.send(rawpcm.encode_audio(pcm, k, None))
        await asyncio.sleep(0.3)
        rx.cancel()
    return rtts


def _forward_ms(variant: str, out: str) -> list[float]:
    """The proxy's own forwarding delays (ms) from its records."""
    vals: list[float] = []
    if variant == "before":
        for f in Path(out).glob("connections/*/messages.jsonl"):
            for line in f.read_text().splitlines():
                row = json.loads(line)
                vals.append((row["t_fwd_ns"] - row["t_ns"]) / 1e6)
        return vals
    for f in Path(out).glob("rollouts/*/chunks.jsonl"):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            vals.append((row["t_fwd_ns"] - row["t_ns"]) / 1e6)
    return vals


async def _one(variant: str, echo_url: str, streams: int, seconds: float) -> dict[str, Any]:
    out = tempfile.mkdtemp(prefix=f"rig-bench-proxy-{variant}-")
    proc = None
    url = echo_url
    if variant != "direct":
        proc, url = _spawn("--serve", variant, "--upstream", echo_url, "--out", out)
    cpu0 = _cpu_s(proc.pid) if proc else 0.0
    rtts = await asyncio.gather(
        *(_stream(url, seconds, i * 0.02 / streams) for i in range(streams))
    )
    res: dict[str, Any] = {}
    if proc is not None:
        cpu = _cpu_s(proc.pid) - cpu0
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)
        fwd = _forward_ms(variant, out)
        res["fwd_p50"], res["fwd_p99"] = np.percentile(fwd, [50, 99]) if fwd else (None, None)
        res["cpu_us_per_msg"] = cpu / max(1, 2 * streams * seconds * 50) * 1e6
    a = np.concatenate([np.asarray(r, dtype=np.float64) for r in rtts]) / 1e6
    res["rtt_p50"], res["rtt_p99"] = np.percentile(a, [50, 99])
    res["n"] = len(a)
    return res


async def _bench(args: argparse.Namespace) -> None:
    echo, echo_url = _spawn("--serve-echo")
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{args.streams} streams x {args.seconds:g} s, 20 ms frames")  # fmt: skip
    print("| round | variant | load avg | rtt p50 ms | rtt p99 ms | fwd p50 ms | fwd p99 ms "
          "| CPU µs/msg | fwd p50 / before |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for rnd in range(args.rounds):
            before: dict[str, Any] | None = None
            for variant in VARIANTS:
                load = os.getloadavg()[0]
                r = await _one(variant, echo_url, args.streams, args.seconds)
                if variant == "before":
                    before = r
                ratio = (
                    f"{r['fwd_p50'] / before['fwd_p50']:.2f}"
                    if before and r.get("fwd_p50") and variant.startswith("measure")
                    else ""
                )

                def f(k: str, r: dict[str, Any] = r) -> str:
                    return "" if r.get(k) is None else f"{r[k]:.3f}"

                print(f"| {rnd} | {variant} | {load:.2f} | {f('rtt_p50')} | {f('rtt_p99')} "
                      f"| {f('fwd_p50')} | {f('fwd_p99')} | {f('cpu_us_per_msg')} | {ratio} |",
                      flush=True)  # fmt: skip
    finally:
        echo.kill()
        echo.wait()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--serve", choices=VARIANTS[1:])
    p.add_argument("--serve-echo", action="store_true")
    p.add_argument("--upstream")
    p.add_argument("--out")
    args = p.parse_args()
    if args.serve_echo:
        _serve_echo()
    elif args.serve:
        _serve_proxy(args.serve, args.upstream, args.out)
    else:
        asyncio.run(_bench(args))


if __name__ == "__main__":
    main()
