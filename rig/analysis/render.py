"""The run report as rich tables and plain text (what `rig report` prints).

Split from rig.analysis.aggregate, which builds the JSON-able report these render.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rig.analysis.aggregate import COMPONENTS, ENDPOINT_PARTS
from rig.analysis.selfecho import rate_line
from rig.analysis.sweep import render_settings
from rig.analysis.voicerender import render_voice


def plural(n: int, noun: str) -> str:
    """`1 rollout`, `3 rollouts`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _fmt(x: Any, nd: int = 0) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def render_table(report: dict[str, Any]) -> Any:
    """A rich Table: one row per scenario, then its items indented."""
    t = Table(
        title=Text(f"run {report['run_id']}: {plural(report['n_rollouts'], 'rollout')}"),
        title_justify="left",
    )
    for col, just in (
        ("scenario / item", "left"),
        ("n", "right"),
        ("status", "left"),
        ("latency p50 ms", "right"),
        ("IQR ms", "right"),
        ("95% CI ms", "right"),
        ("p95 ms [CI]", "right"),
        ("pass [Wilson CI]", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for sc in report["scenarios"]:
        t.add_row(*_row_cells(sc["scenario"], sc), style="bold")
        for it in report["items"]:
            if it["scenario"] == sc["scenario"] and not (
                len(report["items"]) == 1 and it["item"] == "default"
            ):
                t.add_row(*_row_cells(f"  {it['item']}", it))
    return t


def _row_cells(name: str, g: dict[str, Any]) -> list[Any]:
    """Cells of one group; names and statuses come from metrics files: plain `Text`."""
    lat = g["latency_ms"]
    ci = (
        f"{_fmt(lat.get('ci_low'))}–{_fmt(lat.get('ci_high'))}"
        if lat.get("ci_low") is not None
        else "-"
    )
    p = g["pass"]
    passed = f"{p['passed']}/{p['evaluated']}" if p["evaluated"] else "-"
    if p.get("ci_low") is not None:
        passed += f" [{100 * p['ci_low']:.0f}–{100 * p['ci_high']:.0f}%]"
    if p.get("n_a"):  # cannot tell: counted apart, not in the rate
        passed += f" n/a {p['n_a']}"
    p95_ci = lat.get("p95_ci")
    p95 = _fmt(lat.get("p95"))
    if p95_ci:
        p95 += f" [{_fmt(p95_ci[0])}–{_fmt(p95_ci[1])}]"
    status = Text(" ".join(f"{k}={v}" for k, v in sorted(g["status_counts"].items())))
    if g.get("timing_invalid"):
        status.append(f" timing-invalid={g['timing_invalid']}", style="bold red")
    return [
        Text(name),
        str(g["n"]),
        status,
        _fmt(lat.get("median")),
        _fmt(lat.get("iqr")),
        ci,
        p95,
        passed,
    ]


def render_decomposition(report: dict[str, Any]) -> Any:
    """A rich Table of the latency split: per component median [p25–p75] ±median error, ms.

    None when no response of the run has a split (no clock fit could support one)."""
    groups = [(sc["scenario"], sc) for sc in report["scenarios"]] + [
        (f"  {it['item']}", it)
        for it in report["items"]
        if not (len(report["items"]) == 1 and it["item"] == "default")
    ]
    if not any(c in g["components"] for _, g in groups for c in COMPONENTS):
        return None
    t = Table(title="latency decomposition, ms: median \\[p25–p75] ±error", title_justify="left")
    t.add_column("scenario / item")
    for c in COMPONENTS:
        t.add_column(c[: -len("_ms")], justify="right")
    for name, g in sorted(groups, key=lambda x: x[0].strip()):
        cells = []
        for c in COMPONENTS:
            v = g["components"].get(c)
            if not v:
                cells.append("n/a")
                continue
            spread = f"\\[{_fmt(v.get('p25'), 1)}–{_fmt(v.get('p75'), 1)}]"
            err = _fmt(v.get("err_ms_median"), 1)
            cells.append(f"{_fmt(v.get('median'), 1)} {spread} ±{err}  (n={v.get('n')})")
        t.add_row(Text(name), *cells)
    return t


def render_endpointing(report: dict[str, Any]) -> Any:
    """A rich Table of endpointing vs generation per scenario / item: median [p25–p75]
    ±median error, the methods behind them, and `speech_end_offset_ms` beside detect (a
    VAD hearing the end late or early vs a system waiting long). None when no response has
    them."""
    groups = [(sc["scenario"], sc) for sc in report["scenarios"]] + [
        (f"  {it['item']}", it)
        for it in report["items"]
        if not (len(report["items"]) == 1 and it["item"] == "default")
    ]
    if not any("detect_ms" in g["components"] for _, g in groups):
        return None
    t = Table(
        title="endpointing vs generation, ms: median \\[p25–p75] ±error",
        title_justify="left",
    )
    t.add_column("scenario / item")
    for col in ("detect", "generation", "speech end offset", "methods"):
        t.add_column(col, justify="left" if col == "methods" else "right")
    for name, g in sorted(groups, key=lambda x: x[0].strip()):
        comps = g["components"]
        cells = [_spread_cell(comps.get(c)) for c in ENDPOINT_PARTS]
        methods = sorted(
            {m for c in ("detect_ms", "generation_ms") for m in comps.get(c, {}).get("methods", {})}
        )
        t.add_row(Text(name), *cells, Text(", ".join(methods) or "-"))
    return t


def _spread_cell(v: dict[str, Any] | None) -> str:
    if not v:
        return "n/a"
    spread = f"\\[{_fmt(v.get('p25'), 1)}–{_fmt(v.get('p75'), 1)}]"
    err = v.get("err_ms_median")
    tail = f" ±{_fmt(err, 1)}" if err is not None else ""
    return f"{_fmt(v.get('median'), 1)} {spread}{tail}  (n={v.get('n')})"


def format_report(report: dict[str, Any], *, width: int = 120) -> str:
    """The report as plain text (the table, then any problems)."""
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.print(render_table(report))
    decomposition = render_decomposition(report)
    if decomposition is not None:
        console.print(decomposition)
    print_closing(console, report)
    return console.export_text()


def print_closing(
    console: Console, report: dict[str, Any], show: Callable[[Any], None] | None = None
) -> None:
    """What every form of the report ends with: endpointing, settings side by side, problems.
    `show` prints a table (`rig report`: laid out for the width, rig.reporting.layout)."""
    show = show or console.print
    endpointing = render_endpointing(report)
    if endpointing is not None:
        show(endpointing)
    voice = render_voice(report)
    if voice is not None:
        show(voice)
    echo_line = rate_line((report.get("overall") or {}).get("self_interruption"))
    if echo_line is not None:  # runs with an echo condition (rig.analysis.selfecho)
        console.print(echo_line, markup=False)
    side_by_side = render_settings(report)
    if side_by_side is not None:
        show(side_by_side)
    for p in report["problems"]:
        console.print(f"{p['rollout']}: {p['status']}: {p['problem']}", markup=False)
    na = report.get("cannot_tell") or []
    if na:
        console.print(
            f"{len(na)} rollout(s) whose rule cannot tell (n/a: pass null, docs/metrics.md) are "
            f"left out of the pass rates: {', '.join(na[:10])}" + (" ..." if len(na) > 10 else ""),
            markup=False,
        )
