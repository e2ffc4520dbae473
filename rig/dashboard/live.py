"""The dashboard driver: bus → reducer → frozen snapshot → rich Live (or plain lines).

How this works: a pump task wakes `refresh_hz` times a second on the injected clock, drains
its bus subscription into a `Reducer` in small slices (yielding between slices) and swaps in a
new frozen snapshot. rich's `Live` renders that snapshot from its own refresh thread. Headless
mode (auto when the console is not a terminal) prints one plain line per status change and a
summary line every `summary_every_s`. Keys are read with `loop.add_reader` on a TTY stdin in
cbreak mode, never with a blocking read, decoded by `KeyDecoder` and applied to a `ViewState`
(focus, page, search; rig/dashboard/viewstate.py). The table shows as many rows as fit the
terminal's height and pages through the rest.

It runs where no audio streams: in the view process `rig run` starts
(rig/dashboard/viewer.py) and in `rig watch`. The audio process only feeds the view
(rig/telemetry/viewfeed.py).

    async with Dashboard(bus, console=console, headless=None) as dash:
        ...  # run the sessions; they call bus.publish(event)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import replace
from typing import Any, TextIO

from rich.console import Console, RenderableType
from rich.live import Live

from rig.clock import NS_PER_S, Clock, MonotonicClock
from rig.dashboard.keys import KeyDecoder
from rig.dashboard.render import order_rows, pick_detail, render, rows_per_page
from rig.dashboard.viewstate import ViewState
from rig.telemetry.bus import EventBus, Subscription
from rig.telemetry.events import TelemetryEvent
from rig.telemetry.lifecycle import StartStop
from rig.telemetry.snapshot import FleetSnapshot, Reducer, ReducerConfig

DRAIN_SLICE = 512  # events reduced between two yields to the loop
FREEZE_SLICE = 8  # rollouts frozen between two yields


def status_line(ev: TelemetryEvent, since_ns: int) -> str:
    """The headless line for one status event."""
    d = ev.data
    t_s = (ev.t_ns - since_ns) / NS_PER_S
    line = f"[{t_s:8.2f}s] {ev.run_id}/{ev.rollout_id} {d.get('state')}"
    if d.get("status"):
        line += f" {d['status']}"
    if d.get("reason"):
        line += f": {d['reason']}"
    if d.get("target"):
        line += f" ({d['target']})"
    return line


def summary_line(snap: FleetSnapshot, since_ns: int) -> str:
    """The periodic headless summary of the fleet."""
    t_s = (snap.t_ns - since_ns) / NS_PER_S
    counts = " ".join(f"{k}={v}" for k, v in sorted(snap.state_counts.items())) or "no rollouts"
    p99s = [r.lateness_p99_ms for r in snap.rollouts if r.lateness_p99_ms is not None]
    stalls = sum(r.stalls for r in snap.rollouts)
    resp = [r.last_response.latency_ms for r in snap.rollouts if r.last_response]
    line = f"[{t_s:8.2f}s] summary {counts}"
    line += f" | late p99 max {max(p99s):.1f} ms" if p99s else " | late p99 –"
    line += f" | stalls {stalls}"
    if resp:
        line += f" | resp median {sorted(resp)[len(resp) // 2]:.0f} ms"
    s = snap.summary
    if s.timing_invalid:
        line += f" | timing invalid {s.timing_invalid}"
    if s.eta_s is not None and s.done < s.total:
        line += f" | ETA {s.eta_s:.0f} s"
    line += f" | events {snap.events_applied} dropped {snap.events_dropped}"
    return line


class Dashboard(StartStop):
    """Live view (or headless progress lines) of everything published on `bus`."""

    def __init__(
        self,
        bus: EventBus,
        *,
        console: Console | None = None,
        headless: bool | None = None,
        clock: Clock | None = None,
        refresh_hz: float = 4.0,
        detail: str | None = None,
        keys: bool | None = None,
        summary_every_s: float = 10.0,
        max_rows: int | None = None,
        reducer_config: ReducerConfig | None = None,
        queue_size: int = 65536,
        stdin: TextIO | None = None,
        switch_interval_s: float | None = None,
    ) -> None:
        """`max_rows`: table rows per page (None: as many as fit the terminal's height).
        `switch_interval_s`: a GIL switch interval while the Live view runs, for a process
        that also does real-time work (None: leave it)."""
        if refresh_hz <= 0:
            raise ValueError("refresh_hz must be positive")
        self.console = console or Console()
        self.headless = (not self.console.is_terminal) if headless is None else headless
        self.clock: Clock = clock or MonotonicClock(precise=False)
        self.refresh_hz = refresh_hz
        self.view = ViewState(focus=detail)
        self.summary_every_ns = int(summary_every_s * NS_PER_S)
        self.max_rows = max_rows
        self.reducer = Reducer(reducer_config)
        self.quit = asyncio.Event()
        self._bus = bus
        self._queue_size = queue_size
        self._stdin = stdin if stdin is not None else sys.stdin
        self._keys = keys
        self._switch_interval_s = switch_interval_s
        self._saved_switch_s: float | None = None
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._live: Live | None = None
        self._t0_ns = 0
        self._next_summary_ns = 0
        self._snapshot: FleetSnapshot = self.reducer.snapshot(0)
        self._tty_restore: Any = None
        self._key_fd: int | None = None
        self._keys_decoder = KeyDecoder()

    @property
    def detail(self) -> str | None:
        """The rollout chosen for the detail panel (None: the first active one)."""
        return self.view.focus

    @detail.setter
    def detail(self, rollout_id: str | None) -> None:
        self.view.focus = rollout_id

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, pump: bool = True) -> None:
        """Subscribe, start the Live view (unless headless) and the pump task."""
        self._sub = self._bus.subscribe(self._queue_size)
        self._t0_ns = self.clock.now_ns()
        self._next_summary_ns = self._t0_ns + self.summary_every_ns
        self._snapshot = self.reducer.snapshot(self._t0_ns)
        if not self.headless:
            if self._switch_interval_s is not None:
                # rich renders in its own thread; a short GIL switch interval bounds how long
                # that thread can keep the audio loop from waking at its deadline.
                self._saved_switch_s = sys.getswitchinterval()
                sys.setswitchinterval(self._switch_interval_s)
            self._live = Live(
                get_renderable=self.renderable,
                console=self.console,
                refresh_per_second=self.refresh_hz,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
            if self._keys is None or self._keys:
                self._start_keys()
        if pump:
            self._task = asyncio.get_running_loop().create_task(self._pump(), name="dashboard")

    async def stop(self) -> None:
        """Take a last snapshot, print it (headless: a final summary), restore the terminal."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._stop_keys()
        if self._sub is not None:
            self.step()
            if self.headless:
                self.console.print(
                    summary_line(self._snapshot, self._t0_ns),
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )
            self._sub.close()
        if self._live is not None:
            self._live.stop()  # prints the final frame
            self._live = None
        if self._saved_switch_s is not None:
            sys.setswitchinterval(self._saved_switch_s)
            self._saved_switch_s = None

    # -- the pump ----------------------------------------------------------------------------

    @property
    def snapshot(self) -> FleetSnapshot:
        """The latest frozen snapshot (safe to read from any thread)."""
        return self._snapshot

    def step(self) -> FleetSnapshot:
        """Reduce every pending event and take a new snapshot now. Tests call this directly."""
        if self._sub is not None:
            self._reduce(self._sub.drain())
        return self._tick()

    async def _pump(self) -> None:
        period_ns = int(NS_PER_S / self.refresh_hz)
        next_ns = self.clock.now_ns()
        assert self._sub is not None
        while True:
            next_ns = max(next_ns + period_ns, self.clock.now_ns())
            await self.clock.sleep_until(next_ns)
            while len(self._sub) > 0:
                self._reduce(self._sub.drain(DRAIN_SLICE))
                if len(self._sub) > 0:
                    await asyncio.sleep(0)
            # Freeze a few rollouts at a time so a large fleet never holds the loop for long.
            now = self.clock.now_ns()
            parts = []
            for i, part in enumerate(self.reducer.freeze_each(now, self._timelines())):
                parts.append(part)
                if i % FREEZE_SLICE == FREEZE_SLICE - 1:
                    await asyncio.sleep(0)
            self._publish_snapshot(self.reducer.assemble(now, parts))

    def _reduce(self, events: list[TelemetryEvent]) -> None:
        apply = self.reducer.apply
        for ev in events:
            apply(ev)
            if self.headless and ev.kind == "status":
                self.console.print(
                    status_line(ev, self._t0_ns), highlight=False, markup=False, soft_wrap=True
                )

    def _tick(self) -> FleetSnapshot:
        now = self.clock.now_ns()
        return self._publish_snapshot(self.reducer.snapshot(now, self._timelines()))

    def _timelines(self) -> list[str] | None:
        """Only the detailed rollout needs its activity strips (headless needs none)."""
        if self.headless:
            return []
        if not self._snapshot.rollouts:
            return None  # nothing to choose from yet (the first snapshot): all of them
        chosen = pick_detail(self._snapshot, self.detail)
        return [self.detail or "", chosen.rollout_id if chosen else ""]

    def _publish_snapshot(self, snap: FleetSnapshot) -> FleetSnapshot:
        if self._sub is not None:
            self.reducer.dropped = self._sub.dropped
            snap = replace(snap, events_dropped=self._sub.dropped)
        self._snapshot = snap
        if self.headless and snap.t_ns >= self._next_summary_ns:
            self._next_summary_ns = snap.t_ns + self.summary_every_ns
            if snap.rollouts:
                self.console.print(
                    summary_line(snap, self._t0_ns), highlight=False, markup=False, soft_wrap=True
                )
        return snap

    def per_page(self) -> int:
        """Table rows per page: fixed, or what fits the console's height now."""
        if self.max_rows is not None:
            return self.max_rows
        return rows_per_page(self.console.size.height)

    def renderable(self) -> RenderableType:
        """What the Live view shows now (the latest snapshot, the page, the prompt)."""
        v = self.view
        per_page = self.per_page()
        v.clamp(len(self._snapshot.rollouts), per_page)
        return render(
            self._snapshot,
            v.focus,
            per_page,
            page=v.page,
            search=v.search,
            message=v.message,
            width=self.console.size.width,
        )

    # -- keys: focus, pages, search --------------------------------------------------------------

    def select(self, step: int) -> str | None:
        """Move the detail panel to the next (+1) or previous (-1) rollout in display order."""
        self.handle_key("n" if step > 0 else "p")
        return self.detail

    def handle_key(self, key: str) -> None:
        """Apply one key by name (rig/dashboard/keys.py names; printable keys as themselves)."""
        snap = self._snapshot
        order = [r.rollout_id for r in order_rows(snap.rollouts)]
        current = pick_detail(snap, self.view.focus)
        self.view.key(key, order, self.per_page(), current.rollout_id if current else None)
        if self.view.quit:
            self.quit.set()
        if self._live is not None:
            self._live.refresh()

    def handle_input(self, text: str) -> None:
        """Raw terminal input (escape sequences and all)."""
        for key in self._keys_decoder.feed(text):
            self.handle_key(key)

    def _start_keys(self) -> None:
        try:
            fd = self._stdin.fileno()
            if not self._stdin.isatty():
                return
            import termios
            import tty

            self._tty_restore = termios.tcgetattr(fd)
            tty.setcbreak(fd)
            asyncio.get_running_loop().add_reader(fd, self._on_stdin)
            self._key_fd = fd
        except (OSError, ValueError, AttributeError, ImportError):
            self._tty_restore = None

    def _on_stdin(self) -> None:
        assert self._key_fd is not None
        try:
            data = os.read(self._key_fd, 64)
        except OSError:
            return
        if not data:  # EOF: stop listening
            self._stop_keys()
            return
        self.handle_input(data.decode(errors="ignore"))

    def _stop_keys(self) -> None:
        if self._key_fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._key_fd)
            if self._tty_restore is not None:
                import termios

                with contextlib.suppress(Exception):
                    termios.tcsetattr(self._key_fd, termios.TCSADRAIN, self._tty_restore)
            self._key_fd = None
            self._tty_restore = None
