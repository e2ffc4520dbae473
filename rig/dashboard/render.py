"""Pure rendering: a frozen `FleetSnapshot` in, rich renderables out.

Nothing here reads a clock, touches a terminal or holds state: `render(snapshot, ...)` returns
a renderable that rich's Live (or a capture Console in tests) can print. It runs in the view's
own process (`rig.dashboard.viewer`) or in `rig watch`, never in the process that streams.

Layout, top to bottom: the fleet band (counts, ETA, latency so far, stalls, invalid timing),
one page of the fleet table (problems first: failed, stalled, invalid timing; then running,
pending, done), the detail panel of one rollout, a footer with the keys (or the search
prompt). `rows_per_page(height)` is how many table rows fit a terminal of that height.

Text that comes from outside (rollout and run ids, targets, reasons, protocol events) is
always a `rich.text.Text`, never markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rig.telemetry.snapshot import FleetSnapshot, RolloutSnapshot

METER_FLOOR_DBFS = -60.0
METER_WIDTH = 20
RECENT_LINES = 4  # recent events in the detail panel
#: lines that are not table rows: band 2, table header 2, caption 1, panel 10 + recent, footer 1
FIXED_LINES = 2 + 2 + 1 + 10 + RECENT_LINES + 1
MIN_ROWS = 3
_ACTIVE = ("connecting", "running", "draining")
_STATE_STYLE = {
    "pending": "dim",
    "connecting": "yellow",
    "running": "green",
    "draining": "cyan",
    "done": "blue",
}
# display groups, problems first
FAILED, STALLED, INVALID, ACTIVE, PENDING, DONE = range(6)


def _ms(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _db(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def _duration(s: float | None) -> str:
    if s is None:
        return "–"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _natural(text: str) -> tuple[object, ...]:
    """Sort key where r2 comes before r10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def group_of(r: RolloutSnapshot) -> int:
    if r.failed:
        return FAILED
    if r.stalls > 0:
        return STALLED
    if r.timing_valid is False:
        return INVALID
    if r.state in _ACTIVE:
        return ACTIVE
    if r.state == "done":
        return DONE
    return PENDING


def order_rows(rollouts: Sequence[RolloutSnapshot]) -> list[RolloutSnapshot]:
    """Problems first (failed, stalled: most stalls first, invalid timing), then running,
    pending and done; by name within a group."""

    def key(r: RolloutSnapshot) -> tuple[object, ...]:
        g = group_of(r)
        return (g, -r.stalls if g == STALLED else 0, _natural(r.rollout_id), r.run_id)

    return sorted(rollouts, key=key)


def rows_per_page(height: int) -> int:
    """Table rows that fit a terminal `height` lines tall, with the band, panel and footer."""
    return max(MIN_ROWS, height - FIXED_LINES - 1)


def meter(level_dbfs: float | None, width: int = METER_WIDTH) -> Text:
    """A horizontal level meter from METER_FLOOR_DBFS to 0 dBFS."""
    if level_dbfs is None:
        frac = 0.0
    else:
        frac = min(1.0, max(0.0, (level_dbfs - METER_FLOOR_DBFS) / -METER_FLOOR_DBFS))
    filled = round(frac * width)
    style = "red" if frac > 0.95 else "yellow" if frac > 0.8 else "green"
    text = Text("█" * filled, style=style)
    text.append("·" * (width - filled), style="dim")
    text.append(f" {_db(level_dbfs):>4} dBFS")
    return text


def strip(cells: tuple[bool, ...], style: str) -> Text:
    """The activity timeline: '█' where there was speech, '·' where not; newest on the right."""
    text = Text()
    if not cells:
        return Text("(next refresh)", style="dim")
    for on in cells:
        text.append("█" if on else "·", style=style if on else "dim")
    return text


def _state_text(r: RolloutSnapshot) -> Text:
    label = r.state if r.status is None else f"{r.state}:{r.status}"
    style = _STATE_STYLE.get(r.state, "")
    if r.status not in (None, "ok"):
        style = "red"
    return Text(label, style=style)


def _target_text(r: RolloutSnapshot) -> Text:
    if r.target is None and r.dialect is None:
        return Text("–", style="dim")
    how = r.dialect or ""
    if r.transport and r.transport not in ("ws", "device"):
        how = f"{r.transport}/{how}" if how else r.transport
    return Text(" ".join(p for p in (r.target or "", how) if p))


def _timing_text(r: RolloutSnapshot) -> Text:
    if r.timing_valid is None:
        return Text("–", style="dim")
    return Text("ok") if r.timing_valid else Text("invalid", style="bold red")


def fleet_band(snapshot: FleetSnapshot) -> Text:
    """Two lines: where the fleet is, and how it is doing so far."""
    s = snapshot.summary
    text = Text("rig · ", style="bold")
    text.append(", ".join(snapshot.run_ids) or "no run yet", style="bold")
    text.append(f" · {s.done}/{s.total} done")
    if s.skipped:
        text.append(f" (+{s.skipped} before)", style="dim")
    text.append(" · ")
    text.append(f"{s.failed} failed", style="bold red" if s.failed else "")
    text.append(f" · {s.running} running · {s.pending} pending")
    if s.total and s.done >= s.total:
        text.append(" · all done", style="green")
    else:
        text.append(f" · ETA {_duration(s.eta_s)}")
    if s.elapsed_s is not None:
        text.append(f" · elapsed {_duration(s.elapsed_s)}", style="dim")
    text.append("\n")
    text.append(
        f"stalls {s.stalls}" + (f" in {_count(s.stalled_rollouts, 'rollout')}" if s.stalls else ""),
        style="bold red" if s.stalls else "",
    )
    text.append(" · ")
    text.append(f"timing invalid {s.timing_invalid}", style="bold red" if s.timing_invalid else "")
    text.append(" · response latency ")
    if s.n_responses:
        text.append(
            f"p50 {s.latency_p50_ms:.0f} ms · p95 {s.latency_p95_ms:.0f} ms (n={s.n_responses})"
        )
    else:
        text.append("–", style="dim")
    text.append(f" · events {snapshot.events_applied}", style="dim")
    if snapshot.events_dropped:
        text.append(f" (dropped {snapshot.events_dropped})", style="yellow")
    text.no_wrap = True  # two lines whatever the width: the page size counts on it
    text.overflow = "ellipsis"
    return text


def fleet_table(
    snapshot: FleetSnapshot,
    max_rows: int = 30,
    detail: str | None = None,
    page: int = 0,
    rows: Sequence[RolloutSnapshot] | None = None,
) -> Table:
    """One page of rollouts in display order (`order_rows`); the caption says which page."""
    ordered = list(rows) if rows is not None else order_rows(snapshot.rollouts)
    per_page = max(1, max_rows)
    pages = max(1, -(-len(ordered) // per_page))
    page = max(0, min(page, pages - 1))
    table = Table(
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        padding=(0, 1),
        show_edge=False,
    )
    table.add_column("rollout", min_width=8, max_width=24, no_wrap=True, overflow="ellipsis")
    table.add_column("target", min_width=6, max_width=30, no_wrap=True, overflow="ellipsis")
    table.add_column("state", no_wrap=True, min_width=7, max_width=22, overflow="ellipsis")
    for column in ("elapsed", "late p50/99", "stalls", "RTT", "resp", "timing", "up", "down"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    first = page * per_page
    for r in ordered[first : first + per_page]:
        name = Text("▶ " if r.rollout_id == detail else "  ")
        name.append(r.rollout_id)
        table.add_row(
            name,
            _target_text(r),
            _state_text(r),
            _duration(r.elapsed_s),
            f"{_ms(r.lateness_p50_ms)}/{_ms(r.lateness_p99_ms)}",
            Text(str(r.stalls), style="bold red" if r.stalls else ""),
            _ms(r.rtt_ms),
            _ms(r.last_response.latency_ms if r.last_response else None, 0),
            _timing_text(r),
            _db(r.up_level_dbfs),
            _db(r.down_level_dbfs),
        )
    if pages > 1:
        last = min(len(ordered), first + per_page)
        caption = f"page {page + 1}/{pages} · rows {first + 1}-{last} of {len(ordered)} · PgDn/PgUp"
    elif not ordered:
        caption = "no rollouts yet"
    else:
        caption = _count(len(ordered), "rollout")
    table.caption = caption + " · times in ms, levels in dBFS"
    table.caption_justify = "left"
    return table


def _decomposition(r: RolloutSnapshot) -> Text:
    resp = r.last_response
    if resp is None:
        return Text("no response yet", style="dim")
    text = Text(f"{resp.latency_ms:.0f} ms ({resp.placement}, n={r.n_responses})")
    parts = (
        ("uplink", resp.uplink_ms),
        ("model", resp.model_ms),
        ("downlink", resp.downlink_ms),
        ("queue", resp.queue_ms),
    )
    if all(v is None for _, v in parts):
        text.append(" · split: not supported by the clock fit", style="dim")
        return text
    text.append(" = " + " + ".join(f"{name} {_ms(value, 0)}" for name, value in parts) + " ms")
    return text


def detail_panel(r: RolloutSnapshot, timeline_span_ns: int) -> Panel:
    """Level meters, speech activity, timeline strip, clock, latency split, recent events."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, min_width=10)
    grid.add_column(no_wrap=True, overflow="ellipsis")
    grid.add_row("user   ▲", meter(r.up_level_dbfs))
    grid.add_row("system ▼", meter(r.down_level_dbfs))
    speech = Text()
    speech.append(
        "user SPEAKING" if r.up_speech else "user silent",
        style="bold green" if r.up_speech else "dim",
    )
    speech.append("  ")
    speech.append(
        "system SPEAKING" if r.down_speech else "system silent",
        style="bold magenta" if r.down_speech else "dim",
    )
    grid.add_row("speech", speech)
    span_s = timeline_span_ns / 1e9
    grid.add_row(f"user  -{span_s:.0f}s", strip(r.up_timeline, "green"))
    grid.add_row(f"system-{span_s:.0f}s", strip(r.down_timeline, "magenta"))
    clock = Text(f"RTT {_ms(r.rtt_ms)} ms")
    if r.rtt_method:
        clock.append(f" ({r.rtt_method})", style="dim")
    if r.clock_offset_ms is not None:
        clock.append(f", offset {r.clock_offset_ms:+.1f} ms")
    if r.clock_drift_ppm is not None:
        clock.append(f", drift {r.clock_drift_ppm:+.1f} ppm")
    grid.add_row("clock", clock)
    chunks = Text(f"up {r.chunks_up}  down {r.chunks_down}  stalls {r.stalls}  timing ")
    chunks.append_text(_timing_text(r))
    if r.timing_reason:
        chunks.append(f" ({r.timing_reason})")
    grid.add_row("chunks", chunks)
    grid.add_row("latency", _decomposition(r))
    if r.reason:
        grid.add_row("reason", Text(r.reason, style="red" if r.failed else ""))
    events = Text()
    recent = list(reversed(r.recent))[:RECENT_LINES]
    for i, ev in enumerate(recent):
        if i:
            events.append("\n")
        events.append(f"{ev.kind:<8} ", style="dim")
        events.append(ev.text)
    grid.add_row("recent", events if recent else Text("–", style="dim"))
    title = Text("rollout ")
    title.append(r.rollout_id, style="bold")
    target = _target_text(r)
    if r.target or r.dialect:
        title.append(" · ")
        title.append_text(target)
    return Panel(grid, title=title, title_align="left")


def pick_detail(snapshot: FleetSnapshot, wanted: str | None) -> RolloutSnapshot | None:
    """The rollout to detail: `wanted` if known, else the first active one, else the first."""
    if wanted is not None:
        found = snapshot.rollout(wanted)
        if found is not None:
            return found
    for r in snapshot.rollouts:
        if r.state in _ACTIVE:
            return r
    return snapshot.rollouts[0] if snapshot.rollouts else None


def footer(snapshot: FleetSnapshot, search: str | None, message: str | None) -> Text:
    if search is not None:
        text = Text("find rollout: ", style="bold")
        text.append(search)
        text.append("▏  Enter: focus · Esc: cancel", style="dim")
        return text
    text = Text()
    if message:
        text.append(message + " · ", style="yellow")
    text.append(
        "n/p: next/prev · PgDn/PgUp: page · /: find · Esc: follow · q: close view", style="dim"
    )
    return text


def render(
    snapshot: FleetSnapshot,
    detail: str | None = None,
    max_rows: int = 30,
    *,
    page: int = 0,
    search: str | None = None,
    message: str | None = None,
) -> RenderableType:
    """The whole view: band, one page of the table, the detail panel, the footer."""
    chosen = pick_detail(snapshot, detail)
    rows = order_rows(snapshot.rollouts)
    parts: list[RenderableType] = [
        fleet_band(snapshot),
        fleet_table(snapshot, max_rows, chosen.rollout_id if chosen else None, page, rows),
    ]
    if chosen is not None:
        parts.append(detail_panel(chosen, snapshot.timeline_span_ns))
    parts.append(footer(snapshot, search, message))
    return Group(*parts)
