"""Dashboard rendering, keys and the Live/headless driver, on a capture console and a
FakeClock. (The view process fed a recorded stream: tests/dashboard/test_viewer.py.)"""

from __future__ import annotations

import asyncio

import pytest
from rich.console import Console

from rig.clock import FakeClock
from rig.dashboard import Dashboard, render
from rig.dashboard.keys import KeyDecoder
from rig.dashboard.render import order_rows, rows_per_page
from rig.dashboard.viewstate import ViewState, best_match
from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.fleet import eta_s
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
    assert "rig · run7 · 0/2 done · 0 failed · 1 running · 1 pending · ETA –" in out
    assert (
        "stalls 2 in 1 rollout · timing invalid 0 · response latency p50 740 ms · p95 740 ms (n=1)"
        in out
    )
    row = next(line for line in out.splitlines() if "alpha" in line and "running" in line)
    assert "ws://sim:9/a" in row
    assert "0:03" in row  # elapsed since connecting: 50 ms + 150 x 20 ms
    assert "1.0/35.0" in row  # lateness p50/p99 over the 2 s window (contains the stall)
    assert " 2 " in row  # two stalls
    assert "8.5" in row and "740" in row and "-12" in row and "-30" in row
    beta = next(line for line in out.splitlines() if "beta" in line)
    assert "pending" in beta and "–/–" in beta
    # detail panel: the running rollout is picked by default
    assert "rollout alpha" in out
    assert "user silent" in out and "system SPEAKING" in out
    assert "offset -120.2 ms" in out and "drift +12.0 ppm" in out
    assert "740 ms (server, n=1) = uplink 20 + model 650 + downlink 22 + queue 48 ms" in out
    assert "RTT 8.5 ms (clock fit)" in out
    assert "response.done id=resp_1" in out
    assert "up 150  down 50  stalls 2  timing –" in out


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


def test_detail_option_and_pages_instead_of_a_cut_list() -> None:
    clock = FakeClock()
    r = fleet(clock)
    for i in range(40):
        r.apply(events.status("run7", f"r{i:02d}", clock.now_ns(), "pending"))
    snap = r.snapshot(clock.now_ns())
    out = text_of(render(snap, detail="beta", max_rows=10))
    assert "rollout beta" in out and "▶ beta" in out
    assert "page 1/5 · rows 1-10 of 42 · PgDn/PgUp" in out and "more rollouts" not in out
    last = text_of(render(snap, detail="beta", max_rows=10, page=4))
    assert "page 5/5 · rows 41-42 of 42" in last
    assert "r39" in last and "r00" not in last
    # an unknown detail id falls back to the first active rollout
    assert "rollout alpha" in text_of(render(snap, detail="nope"))


def test_rows_put_problems_first_then_running_pending_done() -> None:
    r = Reducer()
    t = 1 * S
    for rid, state, status in (
        ("ok1", "done", "ok"),
        ("run10", "running", None),
        ("run2", "running", None),
        ("wait", "pending", None),
        ("broke", "done", "error"),
        ("stall1", "running", None),
        ("stall3", "done", "ok"),
    ):
        r.apply(events.status("run", rid, t, state, status=status))
    for k in range(3):
        late = 30 * MS
        r.apply(events.chunk("run", "stall3", t, "up", k, 320, lateness_ns=late, stall=True))
    r.apply(events.chunk("run", "stall1", t, "up", 0, 320, lateness_ns=30 * MS, stall=True))
    r.apply(
        events.status(
            "run", "ok1", t, "done", status="ok", timing_valid=False, timing_reason="writer"
        )
    )
    snap = r.snapshot(t)
    order = [x.rollout_id for x in order_rows(snap.rollouts)]
    assert order == ["broke", "stall3", "stall1", "ok1", "run2", "run10", "wait"]
    out = text_of(render(snap))
    assert "1 failed" in out and "stalls 4 in 2 rollouts" in out and "timing invalid 1" in out
    ok1 = next(line for line in out.splitlines() if "ok1" in line and "done" in line)
    assert "invalid" in ok1
    detail = text_of(render(snap, detail="ok1"))
    assert "timing invalid (writer)" in detail


def test_summary_band_counts_eta_and_latency_percentiles() -> None:
    r = Reducer()
    r.apply(events.run("run", 0, 6, concurrency=2))
    for i, (start_s, end_s) in enumerate(((0, 10), (0, 12))):
        rid = f"d{i}"
        r.apply(events.status("run", rid, start_s * S, "running"))
        r.apply(events.status("run", rid, end_s * S, "done", status="ok"))
        r.apply(events.response("run", rid, end_s * S, 800.0 + 100 * i))
    r.apply(events.status("run", "now", 12 * S, "running"))
    r.apply(events.response("run", "now", 14 * S, 1500.0))
    snap = r.snapshot(15 * S)
    s = snap.summary
    assert (s.total, s.done, s.failed, s.running, s.pending) == (6, 2, 0, 1, 3)
    # median of done durations: 12 s (nearest rank of [10, 12]); the running one needs 9 s more,
    # the free slot takes pending #1 and #3 (24 s), the other slot #2 after 9 s (21 s)
    assert s.eta_s == pytest.approx(24.0)
    assert (s.latency_p50_ms, s.latency_p95_ms, s.n_responses) == (900.0, 1500.0, 3)
    out = text_of(render(snap))
    assert "2/6 done · 0 failed · 1 running · 3 pending · ETA 0:24 · elapsed 0:15" in out
    assert "p50 900 ms · p95 1500 ms (n=3)" in out


def test_eta_needs_a_finished_rollout_and_never_claims_zero_for_running_ones() -> None:
    assert eta_s([], [1.0], 3, 2) is None
    assert eta_s([10.0], [4.0, 2.0], 0, 2) == pytest.approx(8.0)
    assert eta_s([10.0], [14.0], 0, 1) is None  # running longer than any finished: unknown
    assert eta_s([10.0], [], 5, 2) == pytest.approx(30.0)  # 3 waves on 2 slots
    assert eta_s([10.0], [], 0, 2) == 0.0


def test_rtt_per_rollout_or_for_every_rollout_of_a_target() -> None:
    r = Reducer()
    r.apply(events.status("run", "a", 0, "running", target="api.x:443", dialect="openai"))
    r.apply(events.status("run", "b", 0, "running", target="other:1", dialect="rig"))
    r.apply(events.rtt("run", "", 1 * S, 23.5, method="ping", target="api.x:443"))
    r.apply(events.rtt("run", "b", 1 * S, 4.0, method="tcp_info"))
    snap = r.snapshot(2 * S)
    a, b = snap.rollout("a"), snap.rollout("b")
    assert a is not None and b is not None
    assert (a.rtt_ms, a.rtt_method, b.rtt_ms, b.rtt_method) == (23.5, "ping", 4.0, "tcp_info")
    assert len(snap.rollouts) == 2  # run-level events never make a row
    r.apply(events.clock("run", "a", 3 * S, rtt_ms=25.0))  # newer wins
    a = r.snapshot(4 * S).rollout("a")
    assert a is not None and (a.rtt_ms, a.rtt_method) == (25.0, "clock fit")
    row = next(line for line in text_of(render(r.snapshot(4 * S))).splitlines() if " a " in line)
    assert "api.x:443 openai" in row and "25.0" in row


def test_untrusted_text_is_shown_as_text_never_as_markup() -> None:
    r = Reducer()
    evil = "[bold red]x[/] [link=http://evil]y"
    r.apply(events.status("run", evil, 0, "done", status="error", reason="[/]boom[red]"))
    r.apply(events.protocol("run", evil, 0, "[blink]server[/blink]", {"k": "[/]"}))
    out = text_of(render(r.snapshot(0)))
    assert evil[:20] in out and "[/]boom[red]" in out and "[blink]server[/blink]" in out


def test_keys_page_focus_and_find_by_name() -> None:
    order = [f"r{i:02d}" for i in range(25)]
    v = ViewState()
    v.key("n", order, 10, current=None)
    assert v.focus == "r00" and v.page == 0
    for _ in range(11):
        v.key("n", order, 10, current=v.focus)
    assert v.focus == "r11" and v.page == 1  # the focus brings its page into view
    v.key("pgdn", order, 10, current=v.focus)
    v.key("pgdn", order, 10, current=v.focus)
    assert v.page == 2 and v.focus == "r11"  # paging leaves the focus where it is
    v.key("home", order, 10, current=v.focus)
    assert v.page == 0
    v.key("G", order, 10, current=v.focus)
    assert v.page == 2
    for k in ("/", "r", "0", "7", "backspace", "5"):
        v.key(k, order, 10, current=v.focus)
    assert v.search == "r05" and v.focus == "r11"  # typing does not move yet
    v.key("enter", order, 10, current=v.focus)
    assert (v.focus, v.page, v.search) == ("r05", 0, None)
    for k in ("/", "z", "enter"):
        v.key(k, order, 10, current=v.focus)
    assert v.focus == "r05" and v.message == "no rollout matches 'z'"
    v.key("esc", order, 10, current=v.focus)
    assert v.focus is None and v.message is None
    v.key("q", order, 10, current=None)
    assert v.quit
    assert best_match("WEATHER", ["what", "weather-r1", "weather"]) == "weather"
    assert best_match("eath", ["what", "weather-r1"]) == "weather-r1"


def test_key_decoder_reads_escape_sequences_even_when_split() -> None:
    d = KeyDecoder()
    assert d.feed("nq\x1b[6~\x1b[5~\x1b[A\x1b[B\r\x7f/") == [
        "n",
        "q",
        "pgdn",
        "pgup",
        "up",
        "down",
        "enter",
        "backspace",
        "/",
    ]
    assert d.feed("\x1b[") == []  # cut by the read
    assert d.feed("6~x") == ["pgdn", "x"]
    assert d.feed("\x1b") == ["esc"]
    assert d.feed("\x1b[99Zq") == ["q"]  # unknown sequences are skipped whole


def test_rows_per_page_fill_the_terminal() -> None:
    clock = FakeClock()
    r = fleet(clock)
    for i in range(60):
        r.apply(events.status("run7", f"p{i:02d}", clock.now_ns(), "pending"))
    snap = r.snapshot(clock.now_ns())
    for height in (30, 45, 60):
        console = Console(record=True, width=140, height=height, color_system=None)
        console.print(render(snap, max_rows=rows_per_page(height)))
        lines = console.export_text().rstrip("\n").splitlines()
        assert len(lines) <= height, height
        assert len(lines) >= height - 3, height  # and use it


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
    dash.handle_input("/b\r")
    assert dash.detail == "b"
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


async def test_latency_panel_shows_detect_and_generation_beside_the_split() -> None:
    clock = FakeClock()
    console = Console(record=True, width=200, force_terminal=True, color_system=None)
    bus = EventBus()
    dash = Dashboard(bus, console=console, clock=clock, keys=False)
    dash.start(pump=False)
    bus.publish(events.status("run8", "delta", 0, "running", target="ws://t"))
    bus.publish(
        events.response(
            "run8", "delta", 0, 840.0, queue_ms=0.2, detect_ms=485.0, generation_ms=355.0
        )
    )
    dash.step()
    await dash.stop()
    out = console.export_text()
    assert "queue 0" in out and "detect 485 + generation 355 ms" in out


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
