"""Pure rendering: a frozen `FleetSnapshot` in, rich renderables out.

Nothing here reads a clock, touches a terminal or holds state: `render(snapshot, ...)` returns
a renderable that rich's Live (or a capture Console in tests) can print. It runs in the view's
own process (`rig.dashboard.viewer`) or in `rig watch`, never in the process that streams.

Layout, top to bottom: the fleet band (counts, ETA, latency so far, stalls, invalid timing),
one page of the fleet table (problems first: failed, stalled, invalid timing; then running,
pending, done), the detail panel of one rollout, a footer with the keys (or the search
prompt). `rows_per_page(height)` is how many table rows fit a terminal of that height.

Text that comes from outside (rollout and run ids, targets, reasons, protocol events: over
MQTT anyone can publish) is always a `rich.text.Text`, never markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from rig.telemetry.snapshot import FleetSnapshot, RolloutSnapshot

METER_FLOOR_DBFS = -60.0
METER_WIDTH = 20
RECENT_LINES = 4  # recent events in the detail panel
#: lines that are not table rows: band 2, table header 2, caption 1, panel (2 borders, 8 rows,
#: a reason) + recent events, footer 1
FIXED_LINES = 2 + 2 + 1 + 11 + RECENT_LINES + 1
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


SPARKS = "▁▂▃▄▅▆▇█"


def rtt_sparkline(history_ms: tuple[float, ...]) -> Text:
    """RTT over time, oldest first, one block per sample scaled between its min and max."""
    lo, hi = min(history_ms), max(history_ms)
    span = hi - lo
    blocks = "".join(
        SPARKS[0 if span <= 0 else min(7, int((x - lo) / span * 8))] for x in history_ms
    )
    out = Text(blocks, style="cyan")
    out.append(f"  {lo:.1f}–{hi:.1f} ms, last {history_ms[-1]:.1f}", style="dim")
    return out


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
    return max(MIN_ROWS, height - FIXED_LINES)


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


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    right: bool  # right-justified (numbers)
    min_width: int
    max_width: int
    drop: int  # on a narrow terminal, columns with the highest `drop` go first (0: never)


COLUMNS = (
    Column("rollout", False, 8, 26, 0),
    Column("target", False, 6, 30, 0),
    Column("state", False, 7, 22, 0),
    Column("elapsed", True, 7, 8, 0),
    Column("late p50/99", True, 11, 15, 0),
    Column("stalls", True, 6, 7, 0),
    Column("RTT", True, 5, 8, 3),
    Column("resp", True, 5, 7, 4),
    Column("timing", True, 7, 7, 5),
    Column("up", True, 4, 4, 6),
    Column("down", True, 4, 4, 7),
)
GAP = 2  # spaces between columns


def _cells(r: RolloutSnapshot, detail: str | None) -> list[Text]:
    name = Text("▶ " if r.rollout_id == detail else "  ")
    name.append(r.rollout_id)
    return [
        name,
        _target_text(r),
        _state_text(r),
        Text(_duration(r.elapsed_s)),
        Text(f"{_ms(r.lateness_p50_ms)}/{_ms(r.lateness_p99_ms)}"),
        Text(str(r.stalls), style="bold red" if r.stalls else ""),
        Text(_ms(r.rtt_ms)),
        Text(_ms(r.last_response.latency_ms if r.last_response else None, 0)),
        _timing_text(r),
        Text(_db(r.up_level_dbfs)),
        Text(_db(r.down_level_dbfs)),
    ]


def _fit(cell: Text, width: int, right: bool) -> Text:
    """`cell` cut (with an ellipsis) or padded to exactly `width` cells."""
    if cell.cell_len > width:
        cell = cell.copy()
        cell.truncate(width, overflow="ellipsis")
    pad = " " * (width - cell.cell_len)
    return Text(pad).append_text(cell) if right else cell.copy().append(pad)


def _widths(rows: list[list[Text]], width: int | None) -> list[int | None]:
    """Each column's width (None: dropped), from the header and the cells shown."""
    ws = [
        max(c.min_width, min(c.max_width, max([len(c.name), *(r[i].cell_len for r in rows)])))
        for i, c in enumerate(COLUMNS)
    ]
    out: list[int | None] = list(ws)
    if width is None:
        return out

    def total() -> int:
        shown = [w for w in out if w is not None]
        return sum(shown) + GAP * (len(shown) - 1)

    for flexible in (1, 0, 2):  # narrow terminal: shrink target, rollout, state first
        excess = total() - width
        if excess > 0:
            w = out[flexible]
            assert w is not None
            out[flexible] = max(COLUMNS[flexible].min_width, w - excess)
    for i in sorted(range(len(COLUMNS)), key=lambda i: -COLUMNS[i].drop):
        if total() <= width or COLUMNS[i].drop == 0:
            break
        out[i] = None
    return out


def fleet_table(
    snapshot: FleetSnapshot,
    max_rows: int = 30,
    detail: str | None = None,
    page: int = 0,
    rows: Sequence[RolloutSnapshot] | None = None,
    width: int | None = None,
) -> Group:
    """One page of rollouts in display order (`order_rows`), laid out as fixed-width lines
    (a rich Table measures every cell on every frame: ten times the cost), with a caption."""
    ordered = list(rows) if rows is not None else order_rows(snapshot.rollouts)
    per_page = max(1, max_rows)
    pages = max(1, -(-len(ordered) // per_page))
    page = max(0, min(page, pages - 1))
    first = page * per_page
    cells = [_cells(r, detail) for r in ordered[first : first + per_page]]
    widths = _widths(cells, width)
    shown = [(i, w) for i, w in enumerate(widths) if w is not None]
    header = Text(style="bold")
    for n, (i, w) in enumerate(shown):
        c = COLUMNS[i]
        header.append((" " * GAP if n else "") + (c.name.rjust(w) if c.right else c.name.ljust(w)))
    lines = [header, Text("─" * header.cell_len, style="dim")]
    for row in cells:
        line = Text()
        for n, (i, w) in enumerate(shown):
            if n:
                line.append(" " * GAP)
            line.append_text(_fit(row[i], w, COLUMNS[i].right))
        lines.append(line)
    if pages > 1:
        last = min(len(ordered), first + per_page)
        caption = f"page {page + 1}/{pages} · rows {first + 1}-{last} of {len(ordered)} · PgDn/PgUp"
    elif not ordered:
        caption = "no rollouts yet"
    else:
        caption = _count(len(ordered), "rollout")
    lines.append(Text(caption + " · times in ms, levels in dBFS", style="dim"))
    for line in lines:
        line.no_wrap = True
        line.overflow = "ellipsis"
    return Group(*lines)


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
    if resp.live:
        text.append(" · split after the stream", style="dim")
    elif all(v is None for _, v in parts):
        text.append(" · split: not supported by the clock fit", style="dim")
    else:
        text.append(" = " + " + ".join(f"{name} {_ms(value, 0)}" for name, value in parts) + " ms")
    if resp.detect_ms is not None or resp.generation_ms is not None:
        # the system's own share cut at its end-of-turn decision (rig.analysis.endpoint)
        text.append(
            f" · detect {_ms(resp.detect_ms, 0)} + generation {_ms(resp.generation_ms, 0)} ms"
        )
    return text


def _label(name: str) -> Text:
    return Text(f"{name:<10} ", style="dim")


def detail_panel(r: RolloutSnapshot, timeline_span_ns: int) -> Panel:
    """Level meters, speech activity, timeline strip, clock, latency split, recent events."""
    lines: list[Text] = []

    def row(name: str, value: Text | str) -> None:
        line = _label(name)
        line.append_text(value if isinstance(value, Text) else Text(value))
        lines.append(line)

    row("user   ▲", meter(r.up_level_dbfs))
    row("system ▼", meter(r.down_level_dbfs))
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
    row("speech", speech)
    span_s = timeline_span_ns / 1e9
    row(f"user  -{span_s:.0f}s", strip(r.up_timeline, "green"))
    row(f"system-{span_s:.0f}s", strip(r.down_timeline, "magenta"))
    clock = Text(f"RTT {_ms(r.rtt_ms)} ms")
    if r.rtt_method:
        clock.append(f" ({r.rtt_method})", style="dim")
    if r.clock_offset_ms is not None:
        clock.append(f", offset {r.clock_offset_ms:+.1f} ms")
    if r.clock_drift_ppm is not None:
        clock.append(f", drift {r.clock_drift_ppm:+.1f} ppm")
    row("clock", clock)
    if len(r.rtt_history_ms) >= 2:
        row("RTT", rtt_sparkline(r.rtt_history_ms))
    chunks = Text(f"up {r.chunks_up}  down {r.chunks_down}  stalls {r.stalls}  timing ")
    chunks.append_text(_timing_text(r))
    if r.timing_reason:
        chunks.append(" (")
        chunks.append(r.timing_reason)
        chunks.append(")")
    row("chunks", chunks)
    row("latency", _decomposition(r))
    if r.reason:
        row("reason", Text(r.reason, style="red" if r.failed else ""))
    recent = list(reversed(r.recent))[:RECENT_LINES]
    for i, ev in enumerate(recent):
        text = Text(f"{ev.kind:<8} ", style="dim")
        text.append(ev.text)
        row("recent" if i == 0 else "", text)
    if not recent:
        row("recent", Text("–", style="dim"))
    for line in lines:
        line.no_wrap = True
        line.overflow = "ellipsis"
    title = Text("rollout ")
    title.append(r.rollout_id, style="bold")
    if r.target or r.dialect:
        title.append(" · ")
        title.append_text(_target_text(r))
    return Panel(Group(*lines), title=title, title_align="left")


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
    width: int | None = None,
) -> RenderableType:
    """The whole view: band, one page of the table, the detail panel, the footer. `width`:
    the terminal's, so the table drops its least needed columns rather than overflow."""
    chosen = pick_detail(snapshot, detail)
    rows = order_rows(snapshot.rollouts)
    parts: list[RenderableType] = [
        fleet_band(snapshot),
        fleet_table(snapshot, max_rows, chosen.rollout_id if chosen else None, page, rows, width),
    ]
    if chosen is not None:
        parts.append(detail_panel(chosen, snapshot.timeline_span_ns))
    parts.append(footer(snapshot, search, message))
    return Group(*parts)
