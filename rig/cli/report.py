"""`rig report RUN_DIR`: per-rollout table, then the aggregate per scenario and item.

The aggregate (rig.analysis.aggregate) gives per scenario and per item: status counts,
response latency median / IQR / bootstrap CI (over items per scenario), pass rate of the
item's timing rule, and the latency decomposition medians when the rollouts carry them.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rig.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="summary across the rollouts of a run")
    p.add_argument("run_dir")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--csv", metavar="FILE", help="write the aggregate as CSV to FILE")
    p.add_argument(
        "--status",
        action="append",
        help="rollout statuses whose latencies count (repeatable; default: ok)",
    )
    p.add_argument(
        "--include-invalid-timing",
        action="store_true",
        help="count rollouts whose own timing failed (timing_valid false) in the aggregates; "
        "by default they are counted and shown, and left out",
    )
    p.add_argument("--confidence", type=float, default=0.95, help="CI level (bootstrap and Wilson)")
    p.add_argument(
        "--rules",
        nargs="+",
        action="extend",
        metavar="KEY=VALUE",
        help="re-score the stored tracks with these timing rules (e.g. yield_max_s=0.5 "
        "yield_from=ack activity.hangover_ms=300) instead of the ones the run used; nothing "
        "is re-run or rewritten (docs/metrics.md)",
    )
    p.add_argument("--no-rollouts", action="store_true", help="skip the per-rollout table")
    p.add_argument(
        "--repair-wav",
        action="store_true",
        help="rewrite WAV headers a crash left behind their data (only for a run that is "
        "over: the run's own process must not be writing)",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rig.analysis.aggregate import (
        aggregate,
        load_run,
        render_decomposition,
        render_endpointing,
        render_table,
        write_csv,
    )
    from rig.analysis.rescore import describe, parse_rule_args, rescore, verdict_changes
    from rig.analysis.sweep import render_settings
    from rig.reporting.network import rtt_table, split_table
    from rig.reporting.summary import load_rollouts, summary_table

    if not os.path.isdir(args.run_dir):
        raise ConfigError(f"{args.run_dir}: not a run directory")
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence must be between 0 and 1, got {args.confidence}")
    data = load_run(args.run_dir)
    rollouts = load_rollouts(args.run_dir)
    changes: list[str] = []
    if args.rules:
        overrides = parse_rule_args(args.rules)
        stored, data = data, rescore(data, overrides)
        changes = verdict_changes(stored, data)
        new = {r.rollout_id: r.metrics for r in data.rollouts}
        rollouts = [{**m, **new.get(str(m.get("rollout_id")), {})} for m in rollouts]
    report = aggregate(
        data,
        statuses=tuple(args.status or ("ok",)),
        confidence=args.confidence,
        include_invalid_timing=bool(args.include_invalid_timing),
    )
    if args.rules:
        report["rescored"] = {"rules": overrides, "verdict_changes": changes}
    if args.csv:
        write_csv(report, args.csv)
    if args.json:
        print(json.dumps({**report, "rollouts": rollouts}, indent=2, allow_nan=False))
        return 0
    console = Console()
    if args.rules:
        console.print(f"re-scored with {describe(overrides)}", markup=False, highlight=False)
        for line in changes:
            console.print(line, markup=False, highlight=False)
    if not args.no_rollouts:
        console.print(summary_table(rollouts))
    console.print(render_table(report))
    decomposition = render_decomposition(report)
    if decomposition is not None:
        console.print(decomposition)
        console.print(clock_fit_table(rollouts))
    if report["timing_invalid"]:
        n = len(report["timing_invalid"])
        what = "left out of" if report["timing_invalid_excluded"] else "counted in"
        console.print(
            f"{n} rollout(s) whose own timing failed (timing_valid false) are {what} the "
            f"aggregates: {', '.join(report['timing_invalid'][:10])}" + (" ..." if n > 10 else ""),
            markup=False,
            style="bold red",
        )
    for table in (rtt_table(rollouts), split_table(rollouts)):
        if table is not None:
            console.print(table)
    endpointing = render_endpointing(report)
    if endpointing is not None:
        console.print(endpointing)
    side_by_side = render_settings(report)
    if side_by_side is not None:
        console.print(side_by_side)
    for p in report["problems"]:
        console.print(f"{p['rollout']}: {p['status']}: {p['problem']}", markup=False)
    for line in wav_header_lines(args.run_dir, repair=args.repair_wav):
        console.print(line, markup=False, highlight=False)
    if args.csv:
        console.print(f"CSV: {args.csv}")
    return 0


def wav_header_lines(run_dir: str, *, repair: bool) -> list[str]:
    """Stale WAV headers (a killed run): what a header-trusting player would miss, and with
    `repair` the fix (rig's own readers read past a stale header either way)."""
    from rig.recordings.wav import repair_header, stale_header

    lines = []
    base = os.path.join(run_dir, "rollouts")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for track in ("user.wav", "system.wav"):
            path = os.path.join(base, name, track)
            stale = stale_header(path)
            if stale is None:
                continue
            counted, held = stale
            if repair:
                repair_header(path)
                lines.append(f"{path}: header repaired ({counted} -> {held} data bytes)")
            else:
                lines.append(
                    f"{path}: header counts {counted} data bytes, the file holds {held} "
                    "(a crashed run); rig report --repair-wav fixes it for other players"
                )
    return lines


def clock_fit_table(rollouts: list[dict[str, Any]]) -> Any:
    """Per rollout: how the server clock was fitted, and how well (what the split rests on)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title="server clock fits", title_justify="left")
    for col in ("rollout", "method", "drift ppm", "offset ±ms", "RTT p50 ms", "note"):
        t.add_column(col, justify="left" if col in ("rollout", "method", "note") else "right")
    for m in rollouts:
        fit = m.get("clock_fit")
        if not isinstance(fit, dict):
            t.add_row(Text(str(m.get("rollout_id"))), "-", "-", "-", "-", "no clock fit")
            continue
        rtt: dict[str, Any] = fit["rtt"] if isinstance(fit.get("rtt"), dict) else {}

        def f(x: Any, nd: int = 1) -> str:
            return "-" if not isinstance(x, int | float) else f"{x:.{nd}f}"

        drift = f(fit.get("drift_ppm"))
        if isinstance(fit.get("drift_err_ppm"), int | float):
            drift += f" ±{f(fit.get('drift_err_ppm'))}"
        note = (_steps_note(fit), fit.get("reason") or fit.get("error"))
        t.add_row(
            Text(str(m.get("rollout_id"))),
            Text(str(fit.get("method", "-"))),
            drift,
            f(fit.get("offset_err_ms"), 2),
            f(rtt.get("rtt_p50_ms"), 2),
            Text("; ".join(str(x) for x in note if x)),
        )
    return t


def _steps_note(fit: dict[str, Any]) -> str:
    """Clock steps the probes proved (each stretch between them was fitted on its own)."""
    steps = fit.get("steps")
    if not isinstance(steps, list) or not steps:
        return ""
    jumps = ", ".join(f"{s.get('step_ms', 0):+.1f} ms" for s in steps if isinstance(s, dict))
    return f"clock stepped {jumps}; fitted per stretch"
