"""The live view's own process: fed a recorded telemetry stream, and started for real.

tests/data/telemetry/fleet.ndjson is what a real run's view feed sent (7 rollouts against
`rig sim`, one refused, one loop block, a per-target RTT, one invalid timing verdict; made by
tests/support/record_telemetry.py). The view reads it through a real socket pair and its
screens are checked on a capture console of a real terminal size.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console

from rig import realtime
from rig.clock import FakeClock
from rig.dashboard.render import order_rows
from rig.dashboard.viewer import run_view
from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.viewfeed import MAX_MESSAGE, socket_pair
from rig.telemetry.viewproc import ViewProcess
from rig.telemetry.wire import decode
from tests.support.ptyterm import Pty

RECORDING = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "fleet.ndjson"


def recorded_lines() -> list[bytes]:
    return [ln for ln in RECORDING.read_bytes().splitlines() if ln.strip()]


def table_rows(screen: str) -> list[str]:
    """The fleet table's rows ("  id ..." or "▶ id ...")."""
    return [ln for ln in screen.splitlines() if ln[:2] in ("  ", "▶ ") and "127.0.0.1:" in ln]


def messages(lines: list[bytes]) -> Iterator[bytes]:
    """The lines as socket messages, as the feed cuts them."""
    chunk: list[bytes] = []
    size = 0
    for ln in lines:
        if chunk and size + len(ln) + 1 > MAX_MESSAGE:
            yield b"\n".join(chunk) + b"\n"
            chunk, size = [], 0
        chunk.append(ln)
        size += len(ln) + 1
    if chunk:
        yield b"\n".join(chunk) + b"\n"


async def view_of(lines: list[bytes], height: int = 45, width: int = 140) -> tuple[str, object]:
    """Feed `lines` to the view through a socket pair; its screen at the end of the stream."""
    t_end = max(json.loads(ln)["t_ns"] for ln in lines)
    ours, theirs = socket_pair()
    console = Console(
        record=True, width=width, height=height, force_terminal=True, color_system=None
    )
    view = asyncio.create_task(
        run_view(
            theirs,
            console=console,
            keys=False,
            pump=False,
            dashboard_kw={"clock": FakeClock(start_ns=t_end)},
        )
    )
    loop = asyncio.get_running_loop()
    ours.setblocking(False)
    assert await loop.sock_recv(ours, 16) == b"ready"
    for message in messages(lines):
        await loop.sock_sendall(ours, message)
    ours.close()  # the run is over
    dash = await asyncio.wait_for(view, 10)
    drawn = console.export_text()
    screen = Console(record=True, width=width, height=height, color_system=None)
    screen.print(dash.renderable())
    text = screen.export_text()
    assert text.strip().splitlines()[-3:] == drawn.strip().splitlines()[-3:]  # what it drew
    return text, dash


async def test_recorded_run_final_screen_problems_first_and_the_band() -> None:
    lines = recorded_lines()
    text, dash = await view_of(lines)
    rows = table_rows(text)
    ids = [ln[2:].split()[0] for ln in rows]
    # what a reducer fed the same events directly says (the recording's stalls came from a real
    # loop block and a real machine's load)
    raw = Reducer()
    for ln in lines:
        raw.apply(decode(ln))
    snap = raw.snapshot(max(json.loads(ln)["t_ns"] for ln in lines))
    assert ids == [r.rollout_id for r in order_rows(snap.rollouts)]
    assert ids[0] == "refused"  # failed first
    assert "done:transport_error" in rows[0] and "127.0.0.1:9 rig" in rows[0]
    stalled = [r for r in order_rows(snap.rollouts) if r.stalls and not r.failed]
    assert [r.stalls for r in stalled] == sorted((r.stalls for r in stalled), reverse=True)
    assert ids[1 : 1 + len(stalled)] == [r.rollout_id for r in stalled]
    weather = next(ln for ln in rows if "weather-r1" in ln)
    assert "invalid" in weather
    s = snap.summary
    assert "rig · fleet · 7/7 done · 1 failed · 0 running · 0 pending · all done" in text
    assert f"stalls {s.stalls} in {s.stalled_rollouts} rollouts" in text
    assert "timing invalid 1" in text
    assert f"p50 {s.latency_p50_ms:.0f} ms · p95 {s.latency_p95_ms:.0f} ms (n=6)" in text
    # RTT: the clock fit's at the end of each rollout (newer than the per-target ping)
    what = next(ln for ln in rows if ln[2:].startswith("what-r0 "))
    fit_rtt = next(
        json.loads(ln)["data"]["rtt_ms"]
        for ln in lines
        if b'"kind":"clock"' in ln and b'"what-r0"' in ln
    )
    assert f" {fit_rtt:.1f} " in what
    # the detail panel follows the first active rollout, else the first row
    assert "rollout what-r0 · 127.0.0.1:" in text
    assert dash.snapshot.events_applied == len(lines)


async def test_recorded_run_mid_stream_shows_running_pending_and_per_target_rtt() -> None:
    lines = recorded_lines()
    rtt_at = next(i for i, ln in enumerate(lines) if b'"kind":"rtt"' in ln)
    text, _ = await view_of(lines[: rtt_at + 1])
    assert "0/7 done · 0 failed · 4 running · 3 pending · ETA –" in text
    running = [ln for ln in table_rows(text) if "running" in ln]
    assert len(running) == 4
    assert all("0.4 " in ln for ln in running)  # the per-target ping RTT, on every row
    assert "RTT 0.4 ms (ping)" in text


async def test_recorded_run_pages_and_keys_on_a_small_terminal() -> None:
    text, dash = await view_of(recorded_lines(), height=24)
    assert "page 1/3 · rows 1-3 of 7 · PgDn/PgUp" in text
    assert len(text.rstrip("\n").splitlines()) <= 24
    dash.handle_input("\x1b[6~")  # PgDn
    page2 = _screen(dash, 24)
    assert "page 2/3 · rows 4-6 of 7" in page2
    dash.handle_input("/recipe-r1\r")  # focus by name: its page comes into view
    focused = _screen(dash, 24)
    assert "▶ recipe-r1" in focused and "rollout recipe-r1 ·" in focused
    dash.handle_input("q")
    assert dash.quit.is_set()


def _screen(dash: object, height: int) -> str:
    console = Console(record=True, width=140, height=height, color_system=None)
    console.print(dash.renderable())  # type: ignore[attr-defined]
    return console.export_text()


# -- the real process --------------------------------------------------------------------------


async def test_view_process_starts_normal_priority_draws_and_q_leaves_the_run_going() -> None:
    term = Pty()
    bus = EventBus()
    try:
        # the caller may be SCHED_FIFO (rig run's loop is): the view must not be
        with realtime.scheduling(3) as sched, term.as_stdio():
            view = ViewProcess(bus)
            assert await view.start(), view.error
        assert view.pid is not None and view.alive
        assert os.sched_getscheduler(view.pid) == os.SCHED_OTHER
        if sched["policy"] == "SCHED_FIFO":
            assert os.sched_getscheduler(0) == os.SCHED_OTHER  # restored
        bus.publish(events.run("live", 0, 2, concurrency=2))
        bus.publish(events.status("live", "alpha", 1, "running", target="h:1", dialect="rig"))
        await term.wait_for("alpha")
        await term.wait_for("0/2 done")
        os.write(term.master, b"q")  # the person closes the view
        assert view.feed is not None
        await asyncio.wait_for(view.feed.closed.wait(), 10)
        assert not view.alive
        for k in range(50):  # the run goes on publishing; nothing blocks or raises
            bus.publish(events.chunk("live", "alpha", k, "up", k, 320, lateness_ns=0))
        assert bus.errors == 0
        await view.stop()
        assert view.proc is None
    finally:
        term.close()


async def test_view_process_draws_the_final_frame_when_the_run_ends() -> None:
    term = Pty()
    bus = EventBus()
    try:
        with term.as_stdio():
            view = ViewProcess(bus)
            assert await view.start(), view.error
        bus.publish(events.run("live", 0, 1, concurrency=1))
        bus.publish(events.status("live", "omega", 1, "running"))
        bus.publish(events.status("live", "omega", 2, "done", status="ok"))
        await view.stop()  # last frame, EOF, wait for the view to exit
        out = await term.wait_for("all done")
        assert "omega" in out and "Traceback" not in out
    finally:
        term.close()


async def test_a_view_that_cannot_start_is_reported_and_leaves_nothing_behind() -> None:
    bus = EventBus()
    missing = ViewProcess(bus, python="/nonexistent/python")
    assert not await missing.start()
    assert missing.error is not None and "did not start" in missing.error
    assert not missing.alive and bus.subscriptions == ()
    broken = ViewProcess(bus, extra_args=["--no-such-option"], start_timeout_s=20)
    assert not await broken.start()  # the view exits before it can draw
    assert broken.error == "live view did not start (it exited)"
    assert broken.proc is None and bus.subscriptions == ()
