"""The floor: what plain Python does per stream-frame when it paces and records N WebSocket
audio streams, written apart from rig (nothing here imports it), so the rig's CPU per
stream-frame can be given as a ratio to it (bench/capacity.py --floor-steps).

    python bench/floorclient.py --streams 50 100 200 --seconds 10 \
        --variant task tick tick-uvloop --runs 3 [--json FILE] [--keep DIR]

N streams of 20 ms PCM16 frames (640 bytes, 16 kHz) go up at absolute deadlines
`t0 + phase + k * 20 ms` (phases quantised to 1 ms slots across the period, the same in every
variant) to bench/floorserver.py in its own process, which sends a paced 20 ms reply frame
down on every stream all the time. Both directions are stamped with `time.monotonic_ns()`;
each frame becomes one JSON line (dir, stream, seq, t_ns, deadline_ns, lateness_ns) plus its
PCM, handed to a writer thread (queue -> files in a temp dir) so the loop never waits on disk.

Variants, one after another within each run:
- `task`: one asyncio task per stream (`asyncio.sleep` to the deadline, `await ws.send`) and
  one receiving task per stream (websockets' asyncio client).
- `tick`: one timer for all streams (a timerfd), one wake-up per due slot; at each wake every
  stream whose frame is due is served synchronously (its own clock read), through websockets'
  sans-I/O `ClientProtocol` (`send_binary`, `data_to_send`) straight to `transport.write`;
  arrivals are stamped and parsed in `asyncio.Protocol.data_received`, no task step per
  message.
- `tick-uvloop`: the same on uvloop (`pip install uvloop`; skipped where it is missing).
`best` names the last one where uvloop is installed, else `tick`.

Per run: client CPU per uplink frame (RUSAGE_SELF, every thread, over the steady window
[t0, t0 + seconds] / uplink frames), uplink lateness p50/p99/max (send stamp minus deadline),
stalls (uplink late > 20 ms), frames received, downlink delay p99 (arrival minus the server's
deadline, carried in the frame), the server's CPU per uplink frame (/proc, same window) and
the writer's backlog at the window's end. The server runs on uvloop wherever it is installed,
for every variant. The table gives the range over runs.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, cast

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

# its sibling modules, also when run as a script under PYTHONSAFEPATH (the test suite)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpustats import proc_cpu_s, self_cpu_s  # noqa: E402
from floorrecorder import Recorder  # noqa: E402
from floorserver import FRAME_NS, tone_frame  # noqa: E402
from floortimer import TickTimer  # noqa: E402

SLOT_NS = 1_000_000  # phase quantum: one wake serves every stream of a slot
STALL_NS = FRAME_NS
START_DELAY_NS = 500_000_000  # from the last handshake to t0
CONNECT_AT_ONCE = 16  # as rig's connect gate
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floorserver.py")
UPLINK_PCM = tone_frame(300.0)  # 6 whole cycles in 20 ms


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def best_variant() -> str:
    return "tick-uvloop" if have_uvloop() else "tick"


def phase_ns(k: int, n: int) -> int:
    """Stream k's offset in the 20 ms period: spread evenly, quantised to 1 ms slots."""
    return (k * (FRAME_NS // SLOT_NS) // n) * SLOT_NS


# --- variant `task`: a task per stream, websockets' asyncio client ------------------------


async def run_task(url: str, n: int, frames: int, rec: Recorder, window: Window) -> None:
    from websockets.asyncio.client import connect

    gate = asyncio.Semaphore(CONNECT_AT_ONCE)

    async def open_one() -> Any:
        async with gate:
            return await connect(url, compression=None, max_queue=None, open_timeout=60)

    conns = await asyncio.gather(*(open_one() for _ in range(n)))

    async def receive(k: int, ws: Any) -> None:
        seq = 0
        async for msg in ws:
            rec.put(("down", k, seq, time.monotonic_ns(), None, msg))
            seq += 1

    async def send(k: int, ws: Any, t0_ns: int) -> None:
        due = t0_ns + phase_ns(k, n)
        for seq in range(frames):
            # a loop that wakes a hair early (float seconds) sleeps again: never send early
            while (delay_ns := due - time.monotonic_ns()) > 0:  # noqa: ASYNC110 - a deadline
                await asyncio.sleep(delay_ns / 1e9)
            t_ns = time.monotonic_ns()
            await ws.send(UPLINK_PCM)
            rec.put(("up", k, seq, t_ns, due, UPLINK_PCM))
            due += FRAME_NS

    rx = [asyncio.create_task(receive(k, ws)) for k, ws in enumerate(conns)]
    t0_ns = window.start()
    await asyncio.gather(*(send(k, ws, t0_ns) for k, ws in enumerate(conns)))
    await window.end()
    await asyncio.gather(*(ws.close() for ws in conns))
    await asyncio.gather(*rx, return_exceptions=True)


# --- variant `tick`: one timer for all streams, sans-I/O over transport.write -------------


class TickStream(asyncio.Protocol):
    """One stream: websockets' sans-I/O protocol over the transport, arrivals stamped here."""

    pauses = 0  # pause_writing calls, every stream of the run

    def __init__(self, k: int, url: str, rec: Recorder) -> None:
        self.k = k
        self.rec = rec
        self.ws = ClientProtocol(parse_uri(url), max_size=None)
        self.seq_down = 0
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.ws.send_request(self.ws.connect())
        self.flush()

    def data_received(self, data: bytes) -> None:
        t_ns = time.monotonic_ns()
        ws = self.ws
        ws.receive_data(data)
        for ev in ws.events_received():
            if type(ev) is Frame:
                if ev.opcode is Opcode.BINARY:
                    self.rec.put(("down", self.k, self.seq_down, t_ns, None, bytes(ev.data)))
                    self.seq_down += 1
            elif isinstance(ev, Response) and not self.opened.done():
                if ws.handshake_exc is not None:
                    self.opened.set_exception(ws.handshake_exc)
                else:
                    self.opened.set_result(None)
        self.flush()

    def send(self, seq: int, due_ns: int) -> None:
        t_ns = time.monotonic_ns()
        self.ws.send_binary(UPLINK_PCM)
        self.flush()
        self.rec.put(("up", self.k, seq, t_ns, due_ns, UPLINK_PCM))

    def flush(self) -> None:
        assert self.transport is not None
        for chunk in self.ws.data_to_send():
            if chunk:
                self.transport.write(chunk)
            else:
                self.transport.write_eof()

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: the socket is not keeping up
        (the frames still go, buffered; counted so a run that leaned on it says so)."""
        TickStream.pauses += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed before the handshake"))
        if not self.closed.done():
            self.closed.set_result(None)


class Ticker:
    """One timer (a timerfd, bench/floortimer.py) for every stream: armed for the earliest
    due slot; a wake serves every slot due by then (each stream its own clock read) and
    re-arms; never sends early."""

    def __init__(self, streams: list[TickStream], t0_ns: int, frames: int) -> None:
        n = len(streams)
        by_slot: dict[int, list[TickStream]] = {}
        for s in streams:
            by_slot.setdefault(phase_ns(s.k, n), []).append(s)
        self.slots = sorted(by_slot.items())
        self.t0_ns = t0_ns
        self.total = frames * len(self.slots)  # (frame, slot) pairs to serve
        self.pos = 0
        self.early_wakes = 0
        self.loop = asyncio.get_running_loop()
        self.timer = TickTimer(self.loop, self.wake)
        self.done: asyncio.Future[None] = self.loop.create_future()

    def due_ns(self, pos: int) -> int:
        seq, j = divmod(pos, len(self.slots))
        return self.t0_ns + seq * FRAME_NS + self.slots[j][0]

    def arm(self) -> None:
        self.timer.arm(self.due_ns(self.pos))

    def wake(self) -> None:
        served = False
        while self.pos < self.total:
            due = self.due_ns(self.pos)
            if due > time.monotonic_ns():
                break
            seq = self.pos // len(self.slots)
            for s in self.slots[self.pos % len(self.slots)][1]:
                s.send(seq, due)
            self.pos += 1
            served = True
        if not served:
            self.early_wakes += 1
        if self.pos < self.total:
            self.arm()
        else:
            self.timer.close()
            self.done.set_result(None)


async def run_tick(url: str, n: int, frames: int, rec: Recorder, window: Window) -> None:
    loop = asyncio.get_running_loop()
    uri = parse_uri(url)
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)

    async def open_one(k: int) -> TickStream:
        async with gate:
            _, s = await loop.create_connection(lambda: TickStream(k, url, rec), uri.host, uri.port)
            await s.opened
            return s

    TickStream.pauses = 0
    streams = list(await asyncio.gather(*(open_one(k) for k in range(n))))
    ticker = Ticker(streams, window.start(), frames)
    ticker.arm()
    await ticker.done
    await window.end()
    window.extra["early_wakes"] = ticker.early_wakes
    window.extra["timer"] = ticker.timer.kind
    window.extra["write_pauses"] = TickStream.pauses
    for s in streams:
        s.ws.send_close()
        s.flush()
    async with asyncio.timeout(5):
        await asyncio.gather(*(s.closed for s in streams))


# --- one run ------------------------------------------------------------------------------


class Window:
    """The steady window [t0, t0 + frames * 20 ms]: CPU of this process and the server."""

    def __init__(self, server_pid: int, frames: int, rec: Recorder) -> None:
        self.server_pid = server_pid
        self.frames = frames
        self.rec = rec
        self.t0_ns = 0
        self.extra: dict[str, Any] = {}

    def start(self) -> int:
        """t0 half a second from now; the CPU counters are read at t0."""
        self.t0_ns = time.monotonic_ns() + START_DELAY_NS
        asyncio.get_running_loop().call_at(self.t0_ns / 1e9, self._read0)
        return self.t0_ns

    def _read0(self) -> None:
        self.cpu0_s, self.server0_s = self_cpu_s(), proc_cpu_s(self.server_pid)

    async def end(self) -> None:
        """After the last uplink frame went out and not before the window's end."""
        delay_ns = self.t0_ns + self.frames * FRAME_NS - time.monotonic_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)
        self.cpu_s = self_cpu_s() - self.cpu0_s
        self.server_s = proc_cpu_s(self.server_pid) - self.server0_s
        self.window_s = (time.monotonic_ns() - self.t0_ns) / 1e9
        self.extra["writer_backlog"] = self.rec.q.qsize()


Variant = Callable[[str, int, int, Recorder, Window], Coroutine[Any, Any, None]]
VARIANTS: dict[str, Variant] = {"task": run_task, "tick": run_tick, "tick-uvloop": run_tick}


@contextmanager
def realtime(priority: int) -> Iterator[str]:
    """The loop thread on SCHED_FIFO (the writer thread, started before, stays normal) and no
    full collection meanwhile: the process settings a rig run gets, without rig."""
    gc.collect()
    gc.freeze()
    saved_gc = gc.get_threshold()
    gc.set_threshold(saved_gc[0], saved_gc[1], 1_000_000)
    saved = os.sched_getscheduler(0), os.sched_getparam(0)
    state = "off"
    if priority > 0:
        try:
            fifo = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
            os.sched_setscheduler(0, fifo, os.sched_param(priority))
            state = f"SCHED_FIFO {priority}"
        except PermissionError:
            state = "SCHED_FIFO refused"
    try:
        yield state
    finally:
        if state.startswith("SCHED_FIFO "):
            os.sched_setscheduler(0, *saved)
        gc.set_threshold(*saved_gc)
        gc.unfreeze()


def pct_ms(x: array.array[int], q: float) -> float | None:
    if not x:
        return None
    s = sorted(x)
    return round(s[min(len(s) - 1, int(q * len(s)))] / 1e6, 3)


def measure(
    streams: int, seconds: float, variant: str, rt_priority: int = 0, out_dir: str | None = None
) -> dict[str, Any]:
    """One run of one variant against a fresh server; recordings in `out_dir` (else a temp
    dir, removed). Returns the figures of the module docstring."""
    uv = variant == "tick-uvloop"
    if uv and not have_uvloop():
        raise SystemExit("tick-uvloop needs uvloop: pip install uvloop")
    frames = round(seconds * 1e9 / FRAME_NS)
    srv_cmd = [sys.executable, SERVER] + (["--uvloop"] if have_uvloop() else [])
    srv = subprocess.Popen(srv_cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None
        url = srv.stdout.readline().strip()
        if not url.startswith("ws://"):
            raise SystemExit(f"floor server did not start: {url!r}")
        with tempfile.TemporaryDirectory() as tmp:
            out = out_dir or tmp
            rec = Recorder(out, streams)
            window = Window(srv.pid, frames, rec)
            coro = VARIANTS[variant](url, streams, frames, rec, window)
            with realtime(rt_priority) as rt:
                if uv:
                    import uvloop

                    uvloop.run(coro)
                else:
                    asyncio.run(coro)
            rec.close()
        srv.terminate()
        server_stats = json.loads(srv.stdout.readline() or "{}")
    finally:
        srv.kill()
        srv.wait(10)
    up, down = rec.late_ns["up"], rec.late_ns["down"]
    return {
        "streams": streams,
        "variant": variant,
        "seconds": seconds,
        "frames_up": len(up),
        "frames_down": len(down),
        "us_per_frame": round(window.cpu_s / len(up) * 1e6, 1) if up else None,
        "p50_ms": pct_ms(up, 0.50),
        "p99_ms": pct_ms(up, 0.99),
        "max_ms": round(max(up) / 1e6, 3) if up else None,
        "stalls": sum(1 for x in up if x > STALL_NS),
        "down_p99_ms": pct_ms(down, 0.99),
        "server_us_per_frame": round(window.server_s / len(up) * 1e6, 1) if up else None,
        "server_tick_p99_ms": server_stats.get("tick_p99_ms"),
        "window_s": round(window.window_s, 3),
        "rt": rt,
        **window.extra,
        "load1": round(os.getloadavg()[0], 2),
    }


def span(rows: list[dict[str, Any]], key: str) -> str:
    xs = [r[key] for r in rows if r.get(key) is not None]
    if not xs:
        return ""
    lo, hi = min(xs), max(xs)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| streams | variant | runs | µs/frame | p99 ms | max ms | stalls | received "
        "| server µs/frame |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["streams"], r["variant"]) for r in rows))
    for n, v in keys:
        rs = [r for r in rows if (r["streams"], r["variant"]) == (n, v)]
        cells = [str(n), v, str(len(rs)), span(rs, "us_per_frame"), span(rs, "p99_ms"),
                 span(rs, "max_ms"), span(rs, "stalls"), span(rs, "frames_down"),
                 span(rs, "server_us_per_frame")]  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--seconds", type=float, default=10.0, help="steady window per run")
    ap.add_argument(
        "--variant", nargs="+", choices=[*VARIANTS, "best"], default=None,
        help="default: task tick, and tick-uvloop where uvloop is installed",
    )  # fmt: skip
    ap.add_argument("--runs", type=int, default=3, help="each variant, alternating")
    ap.add_argument("--rt-priority", type=int, default=0, help="SCHED_FIFO for the loop")
    ap.add_argument("--json", metavar="FILE", help="every run's row as a JSON list")
    ap.add_argument("--keep", metavar="DIR", help="keep the recordings under DIR")
    args = ap.parse_args()
    variants = args.variant or ["task", "tick"] + (["tick-uvloop"] if have_uvloop() else [])
    variants = [best_variant() if v == "best" else v for v in variants]
    print(f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows = []
    for n in args.streams:
        for run in range(args.runs):
            for v in variants:
                out = None
                if args.keep:
                    out = os.path.join(args.keep, f"{v}-n{n}-run{run}")
                    os.makedirs(out, exist_ok=True)
                row = measure(n, args.seconds, v, args.rt_priority, out)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
