"""WebRTC transport cost and capacity on this machine.

    python bench/webrtc.py [--levels 1,2,4,8,12,16] [--speech-s 3] [--frames 2000]

1. Codec cost per 20 ms frame (48 kHz mono): aiortc's Opus encoder (resampler + libopus, as
   the sender runs it in a worker thread) and the libopus decoder, CPU time per frame.
2. Rig-side cost per frame of a live rollout: process CPU time of the rig (the sim runs in
   its own process) divided by 20 ms frames sent (each also receives one).
3. Capacity: N concurrent WebRTC rollouts against `rig sim --transport webrtc` in a child
   process; per level the p50/p99/max of uplink send lateness (deadline -> RTP packet on the
   wire, all frames of all rollouts) and the rollouts' status. The answer is the largest N
   whose p99 stays under 5 ms. The sim shares the machine's cores (it is the far end).
Output is a markdown table; numbers depend on the machine and its other load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.plan import PlanBuilder
from rig.runner import RolloutSpec, Runner
from rig.session import SessionConfig
from rig.transports.webrtc import WebRtcTransport, get_signalling

RATE = 48_000


def codec_cost(frames: int) -> dict[str, float]:
    from aiortc.codecs.opus import OpusDecoder, OpusEncoder
    from aiortc.jitterbuffer import JitterFrame

    from rig.transports.webrtc.track import make_frame

    enc, dec = OpusEncoder(), OpusDecoder()
    x = (8000 * np.sin(2 * np.pi * 300 * np.arange(960 * frames) / RATE)).astype(np.int16)
    payloads = []
    t = time.process_time()
    for k in range(frames):
        p, _ = enc.encode(make_frame(x[k * 960 : (k + 1) * 960], k * 960))
        payloads += p
    enc_us = (time.process_time() - t) / frames * 1e6
    t = time.process_time()
    for k, p in enumerate(payloads):
        dec.decode(JitterFrame(p, k * 960))
    dec_us = (time.process_time() - t) / max(1, len(payloads)) * 1e6
    return {"encode_us": round(enc_us, 1), "decode_us": round(dec_us, 1)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sim(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rig", "sim", "--transport", "webrtc", "--port", str(port)]
        + ["--latency-ms", "300", "--endpoint-silence-ms", "300", "--reply-s", "1.0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("sim did not start")


def plan(speech_s: float) -> Any:
    return (
        PlanBuilder(RATE)
        .add_silence(0.3)
        .add_turn(tone(300.0, speech_s, RATE, -12.0), "t0")
        .add_silence(1.0)
        .build()
    )


async def level(url: str, n: int, speech_s: float, out: str) -> dict[str, Any]:
    def make(clock: Any, gate: asyncio.Semaphore) -> WebRtcTransport:
        return WebRtcTransport(
            get_signalling("whip", url), clock, open_gate=gate, target_host="127.0.0.1"
        )

    specs = [
        RolloutSpec(f"r{i}", plan(speech_s), make, {"url": url}, {}, SessionConfig(max_s=30))
        for i in range(n)
    ]
    runner = Runner(out, run_id=f"n{n}", concurrency=n, clock=MonotonicClock())
    cpu0, wall0 = time.process_time(), time.monotonic()
    await runner.run(specs)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    late: list[float] = []
    statuses: dict[str, int] = {}
    frames = 0
    for i in range(n):
        d = Path(out, f"n{n}", "rollouts", f"r{i}")
        m = json.loads((d / "metrics.json").read_text())
        statuses[m["status"]] = statuses.get(m["status"], 0) + 1
        for line in (d / "chunks.jsonl").read_text().splitlines():
            c = json.loads(line)
            if c["dir"] == "up" and c.get("lateness_ns") is not None:
                late.append(c["lateness_ns"] / 1e6)
                frames += 1
    a = np.asarray(late)
    return {
        "n": n,
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
        "cpu_per_frame_us": round(cpu / max(1, frames) * 1e6, 1),
        "cpu_share": round(cpu / wall, 3),
        "status": statuses,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,2,4,8,12,16")
    ap.add_argument("--speech-s", type=float, default=3.0)
    ap.add_argument("--frames", type=int, default=2000)
    args = ap.parse_args()
    print(f"# bench/webrtc.py on {platform.node()} ({os.cpu_count()} cores), {time.ctime()}\n")
    c = codec_cost(args.frames)
    print(f"Opus per 20 ms frame: encode {c['encode_us']} us, decode {c['decode_us']} us CPU\n")
    port = free_port()
    sim = start_sim(port)
    url = f"http://127.0.0.1:{port}/offer"
    print("| rollouts | lateness p50 ms | p99 ms | max ms | rig CPU/frame us | rig CPU | status |")
    print("|---|---|---|---|---|---|---|")
    try:
        with tempfile.TemporaryDirectory() as out:
            for n in [int(x) for x in args.levels.split(",")]:
                r = asyncio.run(level(url, n, args.speech_s, out))
                print(
                    f"| {n} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
                    f"{r['cpu_per_frame_us']} | {r['cpu_share']:.0%} | {r['status']} |",
                    flush=True,
                )
    finally:
        sim.terminate()
        sim.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
