"""Pure rendering: a frozen `FleetSnapshot` in, rich renderables out.

Nothing here reads a clock, touches a terminal or holds state: `render(snapshot, detail=...)`
returns a renderable that rich's Live thread (or a capture Console in tests) can print. Keep
it that way so the audio loop never waits for rendering. Ids, targets, states and reasons come
from the broker (anyone can publish): they go in as `Text`, never as markup.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rig.telemetry.snapshot import FleetSnapshot, RolloutSnapshot

METER_FLOOR_DBFS = -60.0
METER_WIDTH = 20
_ACTIVE = ("connecting", "running", "draining")
_STATE_STYLE = {
    "pending": "dim",
    "connecting": "yellow",
    "running": "green",
    "draining": "cyan",
    "done": "blue",
}
_ORDER = {"running": 0, "draining": 1, "connecting": 2, "pending": 3, "done": 4}


def _ms(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _db(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


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


def _elapsed(s: float | None) -> str:
    if s is None:
        return "–"
    m, sec = divmod(int(s), 60)
    return f"{m}:{sec:02d}" if m else f"{s:.1f}s"


def fleet_table(snapshot: FleetSnapshot, max_rows: int = 30, detail: str | None = None) -> Table:
    """One row per rollout, active ones first; rows beyond `max_rows` are summarised."""
    counts = " ".join(f"{k}={v}" for k, v in sorted(snapshot.state_counts.items()))
    title = f"rig · {', '.join(snapshot.run_ids) or 'no run yet'} · {counts or 'no rollouts'}"
    table = Table(
        title=Text(title + " · ms, dBFS"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        padding=(0, 1),
    )
    table.add_column("rollout", min_width=8, max_width=24, overflow="ellipsis")
    table.add_column("target", min_width=6, max_width=28, overflow="ellipsis")
    table.add_column("state", no_wrap=True, min_width=7)
    for name in ("elapsed", "late p50/99", "stalls", "RTT", "resp", "up", "down"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    rows = sorted(snapshot.rollouts, key=lambda r: _ORDER.get(r.state, 5))
    for r in rows[:max_rows]:
        marker = "▶ " if r.rollout_id == detail else ""
        table.add_row(
            Text(marker + r.rollout_id),
            Text(r.target or "–"),
            _state_text(r),
            _elapsed(r.elapsed_s),
            f"{_ms(r.lateness_p50_ms)}/{_ms(r.lateness_p99_ms)}",
            Text(str(r.stalls), style="red" if r.stalls else ""),
            _ms(r.rtt_ms),
            _ms(r.last_response.latency_ms if r.last_response else None, 0),
            _db(r.up_level_dbfs),
            _db(r.down_level_dbfs),
        )
    if len(rows) > max_rows:
        table.caption = f"… {len(rows) - max_rows} more rollouts"
    return table


def _decomposition(r: RolloutSnapshot) -> Text:
    resp = r.last_response
    if resp is None:
        return Text("no response yet", style="dim")
    text = Text(f"latency {resp.latency_ms:.0f} ms ({resp.placement}, n={r.n_responses})")
    parts = (
        ("uplink", resp.uplink_ms),
        ("model", resp.model_ms),
        ("downlink", resp.downlink_ms),
        ("queue", resp.queue_ms),
    )
    known = [(n, v) for n, v in parts if v is not None]
    if not known:
        text.append("\n  split: not supported by the clock fit", style="dim")
        return text
    for name, value in parts:
        text.append(f"\n  {name:<8} {_ms(value, 0):>6} ms")
    return text


def detail_panel(r: RolloutSnapshot, timeline_span_ns: int) -> Panel:
    """Level meters, speech activity, timeline strip, recent events, latency split."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
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
    clock = f"RTT {_ms(r.rtt_ms)} ms"
    if r.clock_offset_ms is not None:
        clock += f", offset {r.clock_offset_ms:+.1f} ms"
    if r.clock_drift_ppm is not None:
        clock += f", drift {r.clock_drift_ppm:+.1f} ppm"
    grid.add_row("clock", clock)
    grid.add_row("chunks", f"up {r.chunks_up}  down {r.chunks_down}  stalls {r.stalls}")
    grid.add_row("latency", _decomposition(r))
    events = Text()
    for i, ev in enumerate(reversed(r.recent)):
        if i:
            events.append("\n")
        events.append(f"{ev.kind:<8} ", style="dim")
        events.append(ev.text)
    grid.add_row("recent", events if r.recent else Text("–", style="dim"))
    return Panel(grid, title=Text(f"rollout {r.rollout_id}"), title_align="left")


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


def render(
    snapshot: FleetSnapshot, detail: str | None = None, max_rows: int = 30
) -> RenderableType:
    """The whole dashboard: fleet table, then the detail panel of one rollout."""
    chosen = pick_detail(snapshot, detail)
    parts: list[RenderableType] = [
        fleet_table(snapshot, max_rows, chosen.rollout_id if chosen else None)
    ]
    if chosen is not None:
        parts.append(detail_panel(chosen, snapshot.timeline_span_ns))
    footer = f"events {snapshot.events_applied}"
    if snapshot.events_dropped:
        footer += f", dropped {snapshot.events_dropped}"
    footer += " · n/p: next/previous rollout · q: quit"
    parts.append(Text(footer, style="dim"))
    return Group(*parts)
