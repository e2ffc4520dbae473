"""Dashboard rendering and the Live/headless driver, on a capture console and a FakeClock."""

from __future__ import annotations

import asyncio

from rich.console import Console

from rig.clock import FakeClock
from rig.dashboard import Dashboard, render
from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.snapshot import ReducerConfig

MS = 1_000_000
S = 1_000_000_000


def text_of(renderable: object, width: int = 140) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def fleet(clock: FakeClock) -> Reducer:
    r = Reducer(ReducerConfig(lateness_window_ns=2 * S, timeline_span_ns=10 * S, timeline_cells=20))
    r.apply(events.status("run7", "alpha", clock.now_ns(), "connecting", target="ws://sim:9/a"))
    clock.advance(50 * MS)
    r.apply(events.status("run7", "alpha", clock.now_ns(), "running"))
    r.apply(events.status("run7", "beta", clock.now_ns(), "pending", target="ws://sim:9/b"))
    for k in range(150):  # 3 s of 20 ms chunks, lateness 1 ms, two 35 ms stalls
        clock.advance(20 * MS)
        late = 35 * MS if k in (140, 141) else 1 * MS
        r.apply(
            events.chunk(
                "run7", "alpha", clock.now_ns(), "up", k, 320, lateness_ns=late, level_dbfs=-12.0
            )
        )
        if k >= 100:
            r.apply(
                events.chunk(
                    "run7", "alpha", clock.now_ns(), "down", k - 100, 480, level_dbfs=-30.0
                )
            )
    t = clock.now_ns()
    r.apply(events.activity("run7", "alpha", t - 2500 * MS, "up", True))
    r.apply(events.activity("run7", "alpha", t - 1500 * MS, "up", False))
    r.apply(events.activity("run7", "alpha", t - 1000 * MS, "down", True))
    r.apply(events.clock("run7", "alpha", t, rtt_ms=8.5, offset_ms=-120.25, drift_ppm=12.0))
    r.apply(
        events.response(
            "run7",
            "alpha",
            t,
            740.0,
            uplink_ms=20.0,
            model_ms=650.0,
            downlink_ms=22.0,
            queue_ms=48.0,
            placement="server",
        )
    )
    r.apply(events.protocol("run7", "alpha", t, "response.done", {"id": "resp_1"}))
    return r


def test_render_fleet_table_and_detail_panel() -> None:
    clock = FakeClock()
    snap = fleet(clock).snapshot(clock.now_ns())
    out = text_of(render(snap))
    assert "run7" in out and "pending=1 running=1" in out
    row = next(line for line in out.splitlines() if "alpha" in line and "running" in line)
    assert "ws://sim:9/a" in row
    assert "3.0s" in row  # elapsed since connecting: 50 ms + 150 x 20 ms
    assert "1.0/35.0" in row  # lateness p50/p99 over the 2 s window (contains the stall)
    assert " 2 " in row  # two stalls
    assert "8.5" in row and "740" in row and "-12" in row and "-30" in row
    beta = next(line for line in out.splitlines() if "beta" in line)
    assert "pending" in beta and "–/–" in beta
    # detail panel: the running rollout is picked by default
    assert "rollout alpha" in out
    assert "user silent" in out and "system SPEAKING" in out
    assert "offset -120.2 ms" in out and "drift +12.0 ppm" in out
    assert "latency 740 ms (server, n=1)" in out
    for part in ("uplink       20 ms", "model       650 ms", "queue        48 ms"):
        assert part in out
    assert "response.done id=resp_1" in out
    assert "up 150  down 50  stalls 2" in out


def test_timeline_strip_and_meters_follow_the_snapshot_time() -> None:
    clock = FakeClock()
    r = fleet(clock)
    out = text_of(render(r.snapshot(clock.now_ns())))
    user = next(line for line in out.splitlines() if "user  -10s" in line)
    system = next(line for line in out.splitlines() if "system-10s" in line)
    # 20 cells of 0.5 s: user spoke from -2.5 s to -1.5 s, system from -1 s on
    assert user.split("-10s", 1)[1].strip().startswith("·" * 15 + "██" + "·")
    assert system.split("-10s", 1)[1].strip().startswith("·" * 18 + "██")
    assert "████████████████····  -12 dBFS" in out  # -12 dBFS on a 60 dB meter of 20 cells
    # 5 s later the levels have decayed and the speech has scrolled left
    clock.advance(5 * S)
    later = text_of(render(r.snapshot(clock.now_ns())))
    assert "-12 dBFS" not in later and "   – dBFS" in later
    user = next(line for line in later.splitlines() if "user  -10s" in line)
    assert user.split("-10s", 1)[1].strip().startswith("·" * 5 + "██" + "·")


def test_detail_option_and_row_limit() -> None:
    clock = FakeClock()
    r = fleet(clock)
    for i in range(40):
        r.apply(events.status("run7", f"r{i:02d}", clock.now_ns(), "pending"))
    out = text_of(render(r.snapshot(clock.now_ns()), detail="beta", max_rows=10))
    assert "rollout beta" in out and "▶ beta" in out
    assert "… 32 more rollouts" in out
    # an unknown detail id falls back to the first active rollout
    assert "rollout alpha" in text_of(render(r.snapshot(clock.now_ns()), detail="nope"))


async def test_headless_prints_status_lines_and_periodic_summary() -> None:
    clock = FakeClock(start_ns=1_000 * S)
    console = Console(record=True, width=200, color_system=None)
    bus = EventBus()
    dash = Dashboard(bus, console=console, headless=True, clock=clock, summary_every_s=10.0)
    dash.start(pump=False)
    bus.publish(events.status("run7", "alpha", clock.now_ns(), "connecting", target="ws://u:pw@h"))
    clock.advance(2 * S)
    bus.publish(events.status("run7", "alpha", clock.now_ns(), "running"))
    for k in range(10):
        bus.publish(events.chunk("run7", "alpha", clock.now_ns(), "up", k, 320, lateness_ns=2 * MS))
    dash.step()
    lines = console.export_text(clear=True).splitlines()
    assert lines == [
        "[    0.00s] run7/alpha connecting (ws://u:pw@h)",
        "[    2.00s] run7/alpha running",
    ]
    clock.advance(8 * S)
    for k in range(10, 20):
        bus.publish(events.chunk("run7", "alpha", clock.now_ns(), "up", k, 320, lateness_ns=2 * MS))
    dash.step()  # 10 s after start: one summary line
    summary = console.export_text(clear=True)
    assert "summary running=1 | late p99 max 2.0 ms | stalls 0 | events 22 dropped 0" in summary
    clock.advance(1 * S)
    dash.step()
    assert console.export_text(clear=True) == ""  # next summary only after another 10 s
    bus.publish(
        events.status("run7", "alpha", clock.now_ns(), "done", status="error", reason="peer closed")
    )
    await dash.stop()
    out = console.export_text()
    assert "run7/alpha done error: peer closed" in out
    assert "summary done=1" in out  # final summary on stop
    assert bus.subscriptions == ()


async def test_pump_runs_on_the_injected_clock() -> None:
    clock = FakeClock()
    console = Console(record=True, width=120, color_system=None)
    bus = EventBus()
    async with Dashboard(bus, console=console, headless=True, clock=clock, refresh_hz=4) as dash:
        bus.publish(events.status("run7", "alpha", 0, "running"))
        for _ in range(200):  # FakeClock jumps 250 ms whenever every task is waiting
            if dash.snapshot.rollouts:
                break
            await asyncio.sleep(0)
        snap = dash.snapshot
        assert [r.state for r in snap.rollouts] == ["running"]
        assert snap.t_ns >= 250 * MS and snap.t_ns % (250 * MS) == 0


async def test_keys_pick_the_detailed_rollout_and_quit() -> None:
    clock = FakeClock()
    bus = EventBus()
    dash = Dashboard(bus, console=Console(record=True, width=120), headless=True, clock=clock)
    dash.start(pump=False)
    for rid in ("a", "b", "c"):
        bus.publish(events.status("run", rid, 0, "running"))
    dash.step()
    dash.handle_key("n")
    assert dash.detail == "b"
    dash.handle_key("n")
    dash.handle_key("n")
    assert dash.detail == "a"
    dash.handle_key("p")
    assert dash.detail == "c"
    assert not dash.quit.is_set()
    dash.handle_key("q")
    assert dash.quit.is_set()
    await dash.stop()


async def test_live_view_renders_final_frame_on_a_terminal_console() -> None:
    clock = FakeClock()
    console = Console(record=True, width=140, force_terminal=True, color_system=None)
    bus = EventBus()
    dash = Dashboard(bus, console=console, clock=clock, keys=False)
    assert not dash.headless
    dash.start(pump=False)
    bus.publish(events.status("run7", "gamma", 0, "running", target="ws://t"))
    bus.publish(events.response("run7", "gamma", 0, 321.0))
    dash.step()
    await dash.stop()
    out = console.export_text()
    assert "gamma" in out and "321" in out and "split: not supported" in out


async def test_slow_dashboard_drops_oldest_and_reports_it() -> None:
    clock = FakeClock()
    bus = EventBus()
    console = Console(record=True, width=160, color_system=None)
    dash = Dashboard(bus, console=console, headless=True, clock=clock, queue_size=100)
    dash.start(pump=False)
    for k in range(250):
        bus.publish(events.chunk("run", "a", k, "up", k, 320, lateness_ns=0))
    snap = dash.step()
    assert snap.events_dropped == 150 and snap.rollouts[0].chunks_up == 100
    assert "dropped 150" in text_of(render(snap))
    await dash.stop()
