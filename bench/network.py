"""Network truth on this machine: the latency-split sweep, the relay's cost, and pacing with
and without `--impair` and RTT sampling.

    python bench/network.py [--part sweep|cost|pacing|all] [--jobs 1] [--turns 6]

1. Sweep: rollouts (pipecat dialect: no server clock) at the Pipecat fake through the
   impairment relay (rig.relay, its own process) over delays 10-150 ms, jitter 0-20 ms and
   asymmetric paths. The fake stamps each audio frame's arrival and each reply's first audio
   frame on the shared monotonic clock: truth for uplink (the frame holding the speech end),
   model (reply start - that frame's arrival) and downlink time. Per setting: responses,
   how many have the truth inside the reported error bar (model / uplink / downlink), the
   model estimate's |error| p50 / p95 and the median model error bar.
2. Cost: CPU time of the relay process per relayed chunk (/proc utime + stime), chunks of
   640 B (20 ms of 16 kHz audio) pushed through an echo, 0 ms delay; and of the UDP (WebRTC
   media) relay per datagram of 220 B (an RTP packet of 20 ms of Opus at 64 kbit/s), one in
   flight, 0 ms delay.
3. Pacing: uplink send lateness p50 / p99 of the same rollouts, side by side in one run,
   cases interleaved over `--repeats` rounds (the box is shared: compare within a round):
   RTT sampling off, every 1 s, every 0.1 s, and through the relay process.
Output is markdown; the machine and its load average are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rig.core.units import NS_PER_MS  # noqa: E402
from rig.dialects import get_dialect  # noqa: E402
from rig.net.impair import parse_impair  # noqa: E402
from rig.relay.process import TcpRelay  # noqa: E402
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings  # noqa: E402
from rig.session import SessionConfig  # noqa: E402
from rig.transports.websocket import WebSocketTransport  # noqa: E402
from tests.fakes.harness import tone_plan  # noqa: E402
from tests.fakes.pipecat_server import FakePipecatServer  # noqa: E402

SWEEP = [
    "delay=10ms",
    "delay=50ms",
    "delay=150ms",
    "delay=50ms,jitter=10ms",
    "delay=50ms,jitter=20ms",
    "up:delay=20ms,down:delay=80ms",
    "up:delay=80ms,down:delay=20ms,jitter=5ms",
    "delay=100ms,jitter=20ms",
]


def machine() -> str:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} CPUs, load average {load}"


def _rows(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


async def rollouts(
    tmp: str,
    spec: str | None,
    jobs: int,
    turns: int,
    path_interval_s: float = 1.0,
    rt_priority: int = 0,
) -> tuple[Runner, list[Any]]:
    async with FakePipecatServer(stop_secs=0.3, reply_s=0.4) as pc:
        relay = None
        via = None
        if spec is not None:
            port = int(pc.url.rsplit(":", 1)[1])
            relay = TcpRelay("127.0.0.1", port, parse_impair(spec))
            via = relay.start(os.path.join(tmp, "impair.jsonl"))

        def make(clock: Any, gate: asyncio.Semaphore) -> Any:
            return WebSocketTransport(
                pc.url, get_dialect("pipecat"), clock, open_gate=gate, connect_via=via
            )

        plan = tone_plan(16_000, turns=turns, turn_s=0.6, gap_s=1.6)
        cfg = SessionConfig(drain_quiet_s=0.8, max_s=60, path_interval_s=path_interval_s)
        specs = [RolloutSpec(f"r{i}", plan, make, {}, {}, cfg) for i in range(jobs)]
        runner = Runner(
            tmp, RunnerSettings(run_id="run", concurrency=jobs, rt_priority=rt_priority)
        )
        try:
            await runner.run(specs)
        finally:
            if relay is not None:
                await asyncio.to_thread(relay.stop)
        return runner, list(pc.conns)


def truth_errors(runner: Runner, conns: list[Any]) -> list[dict[str, float]]:
    out = []
    for rid, m in runner.results.items():
        chunks = _rows(os.path.join(runner.run_dir, "rollouts", rid, "chunks.jsonl"))
        up = [c for c in chunks if c["dir"] == "up"]
        send = np.asarray([c["t_ns"] for c in up], dtype=np.int64)
        conn = min(conns, key=lambda c: abs(c.audio_rx_ns[0] - int(send[0])))
        rx = np.asarray(conn.audio_rx_ns, dtype=np.int64)
        answered = [r for r in m.get("responses", []) if r.get("latency_ms") is not None]
        for r, reply_ns in zip(answered, conn.reply_audio_ns, strict=False):
            if r.get("model_ms") is None:
                continue
            k = int(np.searchsorted(send, r["user_end_ns"])) - 1
            up_true = float(rx[k] - send[k]) / NS_PER_MS
            p1 = r["user_end_ns"] + up_true * NS_PER_MS
            out.append(
                {
                    "model": r["model_ms"] - (reply_ns - p1) / NS_PER_MS,
                    "model_err": r["model_err_ms"],
                    "up": r["uplink_ms"] - up_true,
                    "up_err": r["uplink_err_ms"],
                    "down": r["downlink_ms"] - (r["onset_arrival_ns"] - reply_ns) / NS_PER_MS,
                    "down_err": r["downlink_err_ms"],
                }
            )
    return out


async def sweep(tmp: str, jobs: int, turns: int) -> None:
    print(
        "| --impair | n | model in bar | uplink in bar | downlink in bar | "
        "model abs err p50 / p95 ms | model bar p50 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    total = inside = 0
    for i, spec in enumerate(SWEEP):
        d = os.path.join(tmp, f"sweep{i}")
        os.makedirs(d)
        runner, conns = await rollouts(d, f"{spec},seed={i}", jobs, turns)
        errs = truth_errors(runner, conns)
        n = len(errs)
        if not n:
            print(f"| {spec} | 0 | - | - | - | - | - |")
            continue

        def cov(key: str, errs: list[dict[str, float]] = errs) -> int:
            return sum(abs(e[key]) <= e[f"{key}_err"] for e in errs)

        a = np.abs([e["model"] for e in errs])
        total += n
        inside += cov("model")
        print(
            f"| {spec} | {n} | {cov('model')}/{n} | {cov('up')}/{n} | {cov('down')}/{n} | "
            f"{np.percentile(a, 50):.2f} / {np.percentile(a, 95):.2f} | "
            f"{np.median([e['model_err'] for e in errs]):.2f} |",
            flush=True,
        )
    if total:
        print(f"\nmodel time inside its error bar: {inside}/{total} = {inside / total:.1%}")


def cost(tmp: str, chunks: int = 5000) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        relay = TcpRelay("127.0.0.1", port, parse_impair("delay=0ms"))
        host, rport = relay.start(os.path.join(tmp, "cost.jsonl"))
        assert relay._proc is not None
        pid = relay._proc.pid
        cli = socket.create_connection((host, rport))
        peer, _ = srv.accept()
        cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def cpu_s() -> float:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        c0 = cpu_s()
        t0 = time.monotonic()
        got = 0
        for _ in range(chunks):
            cli.sendall(b"x" * 640)
            while got < 640:  # one in flight: each chunk relayed on its own
                got += len(peer.recv(65536))
            got -= 640
        dt = time.monotonic() - t0
        c1 = cpu_s()
        cli.close()
        peer.close()
        relay.stop()
    rows = relay.chunks
    print(
        f"relay: {chunks} chunks of 640 B in {dt:.2f} s; process CPU {1e6 * (c1 - c0) / chunks:.1f}"
        f" µs per chunk (10 ms clock ticks: ±{1e6 * 0.01 / chunks:.1f}); logged {rows} chunks"
    )


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def udp_cost(tmp: str, datagrams: int = 5000) -> None:
    import socket

    from rig.relay.udpprocess import UdpRelay

    relay = UdpRelay(parse_impair("delay=0ms"))
    relay.start(os.path.join(tmp, "udp-cost.jsonl"))
    assert relay._proc is not None
    pid = relay._proc.pid
    rig = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    far = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rig.bind(("127.0.0.1", 0))
    far.bind(("127.0.0.1", 0))
    far.settimeout(2.0)

    async def open_flow() -> tuple[str, int]:
        flow = await relay.call(op="open", rig=list(rig.getsockname()), far_bind="127.0.0.1")
        await relay.call(op="far", flow=flow["flow"], addr=list(far.getsockname()))
        return str(flow["rig_side"][0]), int(flow["rig_side"][1])

    rig_side = asyncio.run(open_flow())
    packet = bytes([0x80, 111]) + bytes(218)
    c0 = _proc_cpu_s(pid)
    t0 = time.monotonic()
    for _ in range(datagrams):
        rig.sendto(packet, rig_side)
        far.recv(2048)  # one in flight: each datagram relayed on its own
    dt = time.monotonic() - t0
    c1 = _proc_cpu_s(pid)
    rig.close()
    far.close()
    relay.stop()
    print(
        f"UDP relay: {datagrams} datagrams of 220 B in {dt:.2f} s; process CPU "
        f"{1e6 * (c1 - c0) / datagrams:.1f} µs per datagram (10 ms clock ticks: "
        f"±{1e6 * 0.01 / datagrams:.1f}); logged {relay.datagrams}"
    )


async def pacing(tmp: str, jobs: int, turns: int, repeats: int) -> None:
    """Cases interleaved, `repeats` rounds, SCHED_FIFO loop as `rig run` has it (priority 3,
    where permitted): per case the p99 of every round and the pooled percentiles."""
    cases = [
        ("direct, RTT sampling off", None, 0.0),
        ("direct, RTT sampling 1 s (default)", None, 1.0),
        ("direct, RTT sampling 0.1 s", None, 0.1),
        ("--impair delay=20ms (relay process), sampling 1 s", "delay=20ms", 1.0),
    ]
    late: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    p99s: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    stalls = dict.fromkeys(late, 0)
    for rnd in range(repeats):
        for i, (name, spec, interval) in enumerate(cases):
            d = os.path.join(tmp, f"pacing{rnd}-{i}")
            os.makedirs(d)
            runner, _ = await rollouts(d, spec, jobs, turns, interval, rt_priority=3)
            one: list[float] = []
            for rid in runner.results:
                rows = _rows(os.path.join(runner.run_dir, "rollouts", rid, "chunks.jsonl"))
                one += [c["lateness_ns"] / NS_PER_MS for c in rows if c["dir"] == "up"]
                stalls[name] += int(runner.results[rid].get("uplink", {}).get("stalls", 0))
            late[name] += one
            p99s[name].append(float(np.percentile(one, 99)))
    print("| case | frames | p50 ms | p99 ms pooled | p99 per round ms | max ms | stalls |")
    print("|---|---|---|---|---|---|---|")
    for name in late:
        a = np.asarray(late[name])
        rounds = ", ".join(f"{x:.2f}" for x in p99s[name])
        print(
            f"| {name} | {a.size} | {np.percentile(a, 50):.3f} | {np.percentile(a, 99):.3f} | "
            f"{rounds} | {a.max():.2f} | {stalls[name]} |",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", default="all", choices=["sweep", "cost", "pacing", "all"])
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3, help="pacing: interleaved rounds")
    args = p.parse_args()
    import tempfile

    print(f"machine: {machine()}\n")
    with tempfile.TemporaryDirectory(prefix="rig-bench-net-") as tmp:
        if args.part in ("sweep", "all"):
            asyncio.run(sweep(tmp, args.jobs, args.turns))
            print()
        if args.part in ("cost", "all"):
            cost(tmp)
            udp_cost(tmp)
            print()
        if args.part in ("pacing", "all"):
            asyncio.run(pacing(tmp, args.jobs, args.turns, args.repeats))
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
