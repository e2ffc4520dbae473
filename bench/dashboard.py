"""Pacing lateness with the dashboard and the MQTT bridge on versus off.

Simulates N paced rollouts on one event loop: each sends a 20 ms frame at absolute deadlines
(`MonotonicClock.sleep_until`), publishes one uplink and one downlink chunk event per frame
(plus an activity flip every 2 s), and records its wake-up lateness. Modes:
  off        bus with no subscriber
  dashboard  + Dashboard (rich Live rendering to a terminal console in its own thread, 4 Hz)
  dash+mqtt  + MqttPublisher to a private mosquitto on 127.0.0.1

    python bench/dashboard.py [--seconds 10] [--streams 1 50] [--json out.json]
                              [--rt-priority 0 3]

--rt-priority compares normal scheduling (0) with SCHED_FIFO for the loop thread (as `rig run`
asks for by default; rig/realtime.py), side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import time
from typing import Any

from rich.console import Console

from rig import realtime
from rig.clock import MonotonicClock
from rig.dashboard import Dashboard
from rig.telemetry import EventBus, events
from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url

FRAME_NS = 20_000_000


async def stream(bus: EventBus, rid: str, n_frames: int, t0: int, out: list[int]) -> None:
    clock = MonotonicClock()
    speech = False
    for k in range(n_frames):
        deadline = t0 + k * FRAME_NS
        await clock.sleep_until(deadline)
        now = clock.now_ns()
        late = now - deadline
        out.append(late)
        bus.publish(
            events.chunk("bench", rid, now, "up", k, 320, lateness_ns=late, level_dbfs=-20.0)
        )
        bus.publish(events.chunk("bench", rid, now, "down", k, 480, level_dbfs=-25.0))
        if k % 100 == 0:
            speech = not speech
            bus.publish(events.activity("bench", rid, now, "up", speech))


async def one(mode: str, n_streams: int, seconds: float, mqtt_url: str | None) -> dict[str, Any]:
    bus = EventBus()
    lateness: list[int] = []
    n_frames = int(seconds * 1e9 / FRAME_NS)
    async with contextlib.AsyncExitStack() as stack:
        dash = pub = None
        if mode in ("dashboard", "dash+mqtt"):
            sink = stack.enter_context(open(os.devnull, "w"))  # noqa: ASYNC230 - /dev/null
            console = Console(file=sink, force_terminal=True, width=160, height=60)
            dash = await stack.enter_async_context(Dashboard(bus, console=console, keys=False))
        if mode == "dash+mqtt":
            assert mqtt_url is not None
            pub = await stack.enter_async_context(MqttPublisher(bus, parse_mqtt_url(mqtt_url)))
            await asyncio.sleep(0.3)  # connected
        for i in range(n_streams):
            bus.publish(events.status("bench", f"r{i:03d}", time.monotonic_ns(), "running"))
        t0 = time.monotonic_ns() + 50_000_000
        await asyncio.gather(
            *(stream(bus, f"r{i:03d}", n_frames, t0, lateness) for i in range(n_streams))
        )
        extra = {
            "dash_dropped": dash.snapshot.events_dropped if dash else None,
            "mqtt_sent": pub.stats.sent if pub else None,
            "mqtt_dropped": pub.dropped if pub else None,
        }
    lat = sorted(lateness)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6

    return {
        "mode": mode,
        "streams": n_streams,
        "frames": len(lat),
        "events_per_s": round(bus.published / seconds),
        "p50_ms": round(pct(0.5), 3),
        "p99_ms": round(pct(0.99), 3),
        "p999_ms": round(pct(0.999), 3),
        "max_ms": round(lat[-1] / 1e6, 3),
        "late_gt_5ms": sum(1 for x in lat if x > 5_000_000),
        **extra,
    }


def start_broker() -> tuple[subprocess.Popen[bytes], str, str]:
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = f"/tmp/bench-mosquitto-{os.getpid()}.conf"
    with open(conf, "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
    proc = subprocess.Popen([exe, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            break
        time.sleep(0.05)
    return proc, f"mqtt://127.0.0.1:{port}", conf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--modes", nargs="+", default=["off", "dashboard", "dash+mqtt"])
    ap.add_argument("--json")
    ap.add_argument("--rt-priority", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    proc, url, conf = start_broker()
    results = []
    try:
        for n in args.streams:
            for mode in args.modes:
                for prio in args.rt_priority:
                    with realtime.scheduling(prio) as sched:
                        r = asyncio.run(one(mode, n, args.seconds, url))
                    r["scheduling"] = sched["policy"]
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        proc.kill()
        proc.wait()
        os.unlink(conf)
    machine = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_before": os.getloadavg(),
    }
    print(json.dumps(machine))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
