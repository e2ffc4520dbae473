"""What watching a run costs its timing: the live view versus headless.

Two benches in one file.

`--terminal` (the one that answers "does the view cost the audio loop anything"): real
`rig run` processes against `rig sim` in its own process, each run in its own tmux session of
a real size (default 140x45), so the view draws into a real pseudo-terminal that a real
terminal (tmux) parses. Per level (1, 10, 50 concurrent rollouts of builtin:timing) and per
round, a headless run and a view run back to back, the order alternating between rounds (so
a drifting machine load does not favour one mode). Per run: uplink send lateness p50/p99/max
over every frame of every rollout (from chunks.jsonl: actual send minus deadline, both on the
shared monotonic clock), the pacer's stalls (frames more than one frame late, from
metrics.json), the load average before the run and a capture of the screen halfway.
`--legacy-python PY` adds runs of another rig install (e.g. the main branch's venv, whose
view still draws in the audio process), for a before/after in the same run.
`--terminal-modes headless view headless-again` adds a second headless run to every round:
how much two identical runs differ on this machine now, the noise floor of the comparison.

    python bench/dashboard.py --terminal [--levels 1 10 50] [--rounds 3] [--json out.json]
        [--size 140x45] [--legacy-python /work/main/.venv/bin/python]

Without `--terminal`: the older synthetic bench. N paced streams on one loop publishing two
chunk events per 20 ms frame; modes `off` (bus only), `dashboard` (the in-process rich view
into a 160x60 console on /dev/null, as `rig run` drew until the view moved out), `dash+mqtt`,
and `viewproc` (the view feed + the view's own process drawing into a pseudo-terminal of
140x45, as `rig run` does now; `viewproc-loop` and `viewproc-thread` move the feed's
coalescing and encoding elsewhere, see rig/telemetry/viewfeed.py).

    python bench/dashboard.py [--seconds 10] [--streams 1 50] [--modes off viewproc]
        [--rt-priority 0 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import pty
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from rich.console import Console

from rig import realtime
from rig.clock import MonotonicClock
from rig.dashboard import Dashboard
from rig.scenarios.builtin import data_path
from rig.telemetry import EventBus, events
from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url
from rig.telemetry.viewproc import ViewProcess

FRAME_NS = 20_000_000
REPO = Path(__file__).resolve().parents[1]


# -- shared -----------------------------------------------------------------------------------


def pct(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    return sorted_vals[max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))]


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="ascii", errors="replace"):  # noqa: SIM115
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


# -- the terminal bench -------------------------------------------------------------------------


def scenario_for(level: int, tmp: str) -> tuple[str, int]:
    """(scenario, --repeat) giving exactly `level` rollouts: builtin:timing has 5 items; one
    rollout plays its longest item (backchannel, a 13 s monologue) from a scenario file."""
    if level % 5 == 0:
        return "builtin:timing", level // 5
    if level != 1:
        raise SystemExit("--levels: 1 or multiples of 5")
    src = data_path("timing", "timing.toml")
    with open(src, "rb") as f:
        doc = tomllib.load(f)
    base = os.path.dirname(src)
    item = next(i for i in doc["items"] if i["id"] == "backchannel")
    for step in item["steps"]:
        if "file" in step:
            step["file"] = os.path.join(base, step["file"])
        if "files" in step:
            step["files"] = [os.path.join(base, x) for x in step["files"]]
    path = os.path.join(tmp, "one.json")
    with open(path, "w") as f:
        json.dump({"suite": doc["suite"], "defaults": doc["defaults"], "items": [item]}, f)
    return path, 1


EPISODE_GAP_NS = 100_000_000


def run_stats(run_dir: str) -> dict[str, Any]:
    """Lateness percentiles over every uplink frame, the pacer's stalls, and stall episodes:
    stalled frames of any rollout less than 100 ms apart are one episode (one loop-wide hold
    stalls every stream at once, so at 50 rollouts it is ~50-150 stalls but one episode)."""
    lateness_ms: list[float] = []
    stall_t_ns: list[int] = []
    stalls = 0
    statuses: dict[str, int] = {}
    for rid in sorted(os.listdir(os.path.join(run_dir, "rollouts"))):
        d = os.path.join(run_dir, "rollouts", rid)
        with open(os.path.join(d, "metrics.json")) as f:
            m = json.load(f)
        statuses[m.get("status", "?")] = statuses.get(m.get("status", "?"), 0) + 1
        stalls += int(m.get("uplink", {}).get("stalls", 0))
        frame_ns = None
        with open(os.path.join(d, "chunks.jsonl")) as f:
            for line in f:
                c = json.loads(line)
                if c["dir"] == "up":
                    late_ns = c["t_ns"] - c["t_sched_ns"]
                    lateness_ms.append(late_ns / 1e6)
                    frame_ns = frame_ns or round(c["n_samples"] * 1e9 / c["sample_rate"])
                    if late_ns > frame_ns:
                        stall_t_ns.append(c["t_sched_ns"])
    lateness_ms.sort()
    stall_t_ns.sort()
    episodes = sum(
        1 for i, t in enumerate(stall_t_ns) if i == 0 or t - stall_t_ns[i - 1] > EPISODE_GAP_NS
    )
    return {
        "frames": len(lateness_ms),
        "p50_ms": round(pct(lateness_ms, 0.50), 3),
        "p99_ms": round(pct(lateness_ms, 0.99), 3),
        "max_ms": round(lateness_ms[-1], 3),
        "stalls": stalls,
        "episodes": episodes,
        "statuses": statuses,
        "lateness_ms": lateness_ms,
    }


TMUX = ["tmux", "-L", f"benchdash{os.getpid()}", "-f", "/dev/null"]  # a private tmux server


def tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False).stdout


def one_terminal_run(
    python: str,
    mode: str,
    scenario: str,
    repeat: int,
    level: int,
    url: str,
    out: str,
    size: str,
    rt_priority: int = 3,
) -> dict[str, Any]:
    run_id = f"{mode}-{level}-{time.monotonic_ns()}"
    done = os.path.join(out, run_id + ".exit")
    cols, rows = size.split("x")
    cmd = (  # from `out`: each interpreter runs the rig it has installed, not this checkout's
        f"cd {out} && {python} -m rig run {scenario} --target {url} --repeat {repeat} "
        f"--concurrency {level} --out {out} --run-id {run_id} --rt-priority {rt_priority}"
        + (" --headless" if mode.startswith("headless") else "")
        + f"; echo $? > {done}"
    )
    session = f"benchdash{os.getpid()}"
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", cols, "-y", rows, cmd)
    screen = ""
    try:
        while not os.path.exists(done):
            time.sleep(0.25)
            if not screen and time.monotonic() - t0 > 6:
                screen = tmux("capture-pane", "-p", "-t", session)
            if time.monotonic() - t0 > 300:
                raise RuntimeError(f"{mode} run at {level} did not finish")
    finally:
        tmux("kill-server")
    code = open(done).read().strip()
    r = {
        "mode": mode,
        "level": level,
        "exit": code,
        "load_1m_before": round(load, 2),
        "wall_s": round(time.monotonic() - t0, 1),
        **run_stats(os.path.join(out, run_id)),
    }
    if not mode.startswith("headless"):
        r["view_seen"] = "rig · " in screen and "late p50/99" in screen
    return r


def terminal_bench(args: argparse.Namespace) -> None:
    modes = args.terminal_modes + (["legacy-view"] if args.legacy_python else [])
    python = {m: sys.executable for m in modes}
    python["legacy-view"] = args.legacy_python
    prio = args.rt_priority[0] if args.rt_priority != [0] else 3
    sim = subprocess.Popen(
        [sys.executable, "-m", "rig", "sim", "--port", "0", "--reply-s", "2"]
        + ["--rt-priority", str(prio)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert sim.stdout is not None
    m = re.search(r"ws://\S+", sim.stdout.readline())
    assert m, "rig sim did not say where it listens"
    url = m.group(0)
    results: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as keep:
            out = args.keep or keep.enter_context(tempfile.TemporaryDirectory())
            os.makedirs(out, exist_ok=True)
            for rnd in range(args.rounds):
                for level in args.levels:
                    scenario, repeat = scenario_for(level, out)
                    order = modes if rnd % 2 == 0 else list(reversed(modes))
                    for mode in order:
                        r = one_terminal_run(
                            python[mode], mode, scenario, repeat, level, url, out, args.size, prio
                        )
                        r["round"] = rnd
                        results.append(r)
                        print(
                            json.dumps({k: v for k, v in r.items() if k != "lateness_ms"}),
                            flush=True,
                        )
    finally:
        sim.terminate()
        sim.wait(10)
    info = {**machine(), "terminal": f"tmux {args.size}", "load_after": os.getloadavg()}
    print(json.dumps(info))
    print(terminal_table(results, modes))
    print()
    print(pooled_table(results, modes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "results": results}, f)


def pooled_table(results: list[dict[str, Any]], modes: list[str]) -> str:
    """Markdown: per level and mode, every frame of every round pooled (p50/p99/max), stalls
    and stall episodes summed over the rounds, and the ratios to headless."""
    lines = [
        "| rollouts | mode | rounds | frames | p50 ms | p99 ms | max ms | stalls | episodes "
        "| p99 / headless | stalls / headless |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for level in sorted({r["level"] for r in results}):
        base: dict[str, Any] = {}
        for mode in modes:
            rs = [r for r in results if r["level"] == level and r["mode"] == mode]
            if not rs:
                continue
            lat = sorted(x for r in rs for x in r["lateness_ms"])
            row = {
                "p50": pct(lat, 0.5),
                "p99": pct(lat, 0.99),
                "max": lat[-1],
                "stalls": sum(r["stalls"] for r in rs),
                "episodes": sum(r["episodes"] for r in rs),
            }
            if mode == "headless":
                base = row
            ratio_p99 = f"{row['p99'] / base['p99']:.2f}" if base else "–"
            ratio_st = f"{row['stalls'] / base['stalls']:.2f}" if base.get("stalls") else "–"
            lines.append(
                f"| {level} | {mode} | {len(rs)} | {len(lat)} | {row['p50']:.2f} | "
                f"{row['p99']:.2f} | {row['max']:.1f} | {row['stalls']} | {row['episodes']} | "
                f"{ratio_p99} | {ratio_st} |"
            )
    return "\n".join(lines)


def terminal_table(results: list[dict[str, Any]], modes: list[str]) -> str:
    """Markdown: per level and mode, each round's p50/p99/max/stalls, then view/headless ratios
    of p99 and stalls, round by round (same round = same minutes of machine load)."""
    lines = [
        "| rollouts | mode | p50 ms | p99 ms | max ms | stalls | load 1 min |",
        "|---|---|---|---|---|---|---|",
    ]
    levels = sorted({r["level"] for r in results})
    for level in levels:
        for mode in modes:
            rs = [r for r in results if r["level"] == level and r["mode"] == mode]
            if not rs:
                continue
            lines.append(
                f"| {level} | {mode} | "
                + " | ".join(
                    ", ".join(f"{r[k]:g}" for r in rs)
                    for k in ("p50_ms", "p99_ms", "max_ms", "stalls", "load_1m_before")
                )
                + " |"
            )
    lines += [
        "",
        "| rollouts | mode | p99 / headless p99, per round | median | stalls − headless stalls, "
        "per round | median |",
        "|---|---|---|---|---|---|",
    ]
    for level in levels:
        base = {r["round"]: r for r in results if r["level"] == level and r["mode"] == "headless"}
        for mode in modes[1:]:
            rs = [r for r in results if r["level"] == level and r["mode"] == mode]
            pairs = [(r, base[r["round"]]) for r in rs if r["round"] in base]
            ratios = sorted(r["p99_ms"] / b["p99_ms"] for r, b in pairs)
            diffs = sorted(r["stalls"] - b["stalls"] for r, b in pairs)
            if not pairs:
                continue
            lines.append(
                f"| {level} | {mode} | "
                + ", ".join(f"{r['p99_ms'] / b['p99_ms']:.2f}" for r, b in pairs)
                + f" | {ratios[len(ratios) // 2]:.2f} | "
                + ", ".join(f"{r['stalls'] - b['stalls']:+d}" for r, b in pairs)
                + f" | {diffs[len(diffs) // 2]:+d} |"
            )
    return "\n".join(lines)


# -- the synthetic bench -----------------------------------------------------------------------


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


class PtyTerminal:
    """A pseudo-terminal of a real size whose output a thread reads and discards, as a
    terminal would; `as_stdio()` points fds 0-2 at it while a child that inherits them starts."""

    def __init__(self, cols: int, rows: int) -> None:
        import fcntl
        import struct
        import termios
        import threading

        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.bytes_drawn = 0
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while data := os.read(self.master, 65536):
                self.bytes_drawn += len(data)

    @contextlib.contextmanager
    def as_stdio(self) -> Any:
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        try:
            for fd in (0, 1, 2):
                os.dup2(self.slave, fd)
            yield
        finally:
            for fd, s in zip((0, 1, 2), saved, strict=True):
                os.dup2(s, fd)
                os.close(s)

    def close(self) -> None:
        os.close(self.slave)
        with contextlib.suppress(OSError):
            os.close(self.master)


async def one(mode: str, n_streams: int, seconds: float, mqtt_url: str | None) -> dict[str, Any]:
    bus = EventBus()
    lateness: list[int] = []
    n_frames = int(seconds * 1e9 / FRAME_NS)
    async with contextlib.AsyncExitStack() as stack:
        dash = pub = view = None
        if mode in ("dashboard", "dash+mqtt"):
            sink = stack.enter_context(open(os.devnull, "w"))  # noqa: ASYNC230 - /dev/null
            console = Console(file=sink, force_terminal=True, width=160, height=60)
            dash = await stack.enter_async_context(
                Dashboard(bus, console=console, keys=False, switch_interval_s=0.001)
            )
        if mode.startswith("viewproc"):
            term = PtyTerminal(140, 45)
            stack.callback(term.close)
            view = ViewProcess(bus, feed_mode=mode.partition("-")[2] or "put")
            with term.as_stdio():
                await view.start()
            stack.push_async_callback(view.stop)
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
        if view is not None and view.feed is not None:
            st = view.feed.stats
            extra.update(
                feed_events=st.events,
                feed_dropped=st.dropped + st.dropped_queue,
                feed_loop_ms_per_s=round(st.busy_ns / 1e6 / seconds, 2),
                feed_max_slice_ms=round(st.max_busy_slice_ns / 1e6, 3),
            )
    lat = sorted(x / 1e6 for x in lateness)
    return {
        "mode": mode,
        "streams": n_streams,
        "frames": len(lat),
        "events_per_s": round(bus.published / seconds),
        "p50_ms": round(pct(lat, 0.5), 3),
        "p99_ms": round(pct(lat, 0.99), 3),
        "p999_ms": round(pct(lat, 0.999), 3),
        "max_ms": round(lat[-1], 3),
        "late_gt_5ms": sum(1 for x in lat if x > 5),
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


def synthetic_bench(args: argparse.Namespace) -> None:
    proc, url, conf = start_broker()
    results = []
    try:
        for n in args.streams:
            for mode in args.modes:
                for prio in args.rt_priority:
                    # as in a run: SCHED_FIFO if asked, no full GC, 1 ms GIL switch interval
                    with realtime.scheduling(prio) as sched, realtime.streaming():
                        r = asyncio.run(one(mode, n, args.seconds, url))
                    r["scheduling"] = sched["policy"]
                    r["load_1m"] = round(os.getloadavg()[0], 2)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        proc.kill()
        proc.wait()
        os.unlink(conf)
    info = {**machine(), "load_after": os.getloadavg()}
    print(json.dumps(info))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "results": results}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terminal", action="store_true", help="real rig run in tmux vs headless")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 10, 50])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="140x45", help="terminal COLSxROWS")
    ap.add_argument("--legacy-python", help="also run this interpreter's rig (before/after)")
    ap.add_argument("--terminal-modes", nargs="+", default=["headless", "view"])
    ap.add_argument("--keep", help="keep the run directories here")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--modes", nargs="+", default=["off", "dashboard", "viewproc", "dash+mqtt"])
    ap.add_argument("--json")
    ap.add_argument(
        "--rt-priority",
        type=int,
        nargs="+",
        default=[0],
        help="synthetic: compare these; --terminal: SCHED_FIFO priority of rig run and rig sim "
        "(default 3, as `rig run`)",
    )
    args = ap.parse_args()
    if args.terminal:
        if shutil.which("tmux") is None:
            raise SystemExit("--terminal needs tmux")
        terminal_bench(args)
    else:
        synthetic_bench(args)


if __name__ == "__main__":
    main()
