"""`rig report RUN_DIR`: per-rollout table, then the aggregate per scenario and item.

The aggregate (rig.analysis.aggregate) gives per scenario and per item: status counts,
response latency median / IQR / bootstrap CI (over items per scenario), pass rate of the
item's timing rule, and the latency decomposition medians when the rollouts carry them.

For CI (docs/api.md): `--fail-under METRIC=X` / `--max METRIC=X` gates, `--junit FILE`,
`--csv DIR` (tidy rollouts.csv, responses.csv, and summary.csv). Exit status: 0 ok; 1 a gate
failed (one line each on stderr); 2 usage; 3 with gates or --junit, a rollout did not finish
(error, missing, corrupt metrics): the numbers gated on are incomplete.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rig.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="summary across the rollouts of a run")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (recordings/<run_id>)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--wide",
        action="store_true",
        help="every table at its full width, one line per row (default: laid out for the "
        "terminal's width, columns that do not fit stacked below)",
    )
    p.add_argument(
        "--csv",
        metavar="DIR",
        help="write rollouts.csv, responses.csv (tidy: one row each) and summary.csv to DIR",
    )
    g = p.add_argument_group("CI gates (exit 1 when one fails, docs/api.md)")
    g.add_argument(
        "--fail-under",
        action="append",
        metavar="METRIC=X",
        help="fail when METRIC is below X (repeatable), e.g. pass_rate=0.9, ok_rate=1",
    )
    g.add_argument(
        "--max",
        action="append",
        metavar="METRIC=X",
        help="fail when METRIC is above X (repeatable), e.g. latency_p95_ms=1200",
    )
    g.add_argument(
        "--junit", metavar="FILE", help="write a JUnit XML report (one case per rollout)"
    )
    p.add_argument(
        "--otel",
        action="store_true",
        help="export each rollout as an OpenTelemetry trace over OTLP/HTTP to "
        "$OTEL_EXPORTER_OTLP_ENDPOINT (the otel extra)",
    )
    h = p.add_argument_group("HTML report")
    h.add_argument("--html", metavar="FILE", help="write one self-contained HTML report page")
    h.add_argument(
        "--html-audio",
        choices=("embed", "link", "none"),
        default="embed",
        help="audio players: WAVs embedded (default, up to --html-embed-max-mb), linked by "
        "relative path, or none",
    )
    h.add_argument(
        "--html-embed-max-mb",
        type=float,
        default=25.0,
        help="embed the run's WAVs only while they total at most this (else link them)",
    )
    p.add_argument(
        "--status",
        action="append",
        help="rollout statuses whose latencies count (repeatable; default: ok)",
    )
    p.add_argument(
        "--include-invalid-timing",
        "--include-invalid",
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
        "--by",
        action="append",
        metavar="TAG",
        help="also every table per value of this item tag (repeatable: nested), e.g. "
        "--by conversation; rollouts without it are grouped as (none)",
    )
    p.add_argument(
        "--cluster",
        metavar="TAG",
        help="the bootstrap resamples this tag's values (e.g. conversations) instead of items",
    )
    p.add_argument(
        "--repair-wav",
        action="store_true",
        help="rewrite WAV headers a crash left behind their data (only for a run that is "
        "over: the run's own process must not be writing)",
    )
    from rig.scoring.options import add_report_options

    add_report_options(p)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rig.analysis.aggregate import aggregate, load_run
    from rig.analysis.gates import check_gates, gate_values, parse_gates
    from rig.analysis.render import print_closing, render_decomposition, render_table
    from rig.analysis.rescore import describe, parse_rule_args, rescore, verdict_changes
    from rig.cli.inputs import check_run_dir
    from rig.reporting.header import header_lines
    from rig.reporting.network import rtt_legend, rtt_table, split_table
    from rig.reporting.proxylegs import LEGEND as PROXY_LEGEND
    from rig.reporting.proxylegs import proxy_table
    from rig.reporting.summary import LEGEND, load_rollouts, print_table, summary_table
    from rig.reporting.verdicts import verdicts_table

    check_run_dir(args.run_dir)
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence must be between 0 and 1, got {args.confidence}")
    gates = parse_gates(args.fail_under, args.max)  # usage errors before any output
    data = load_run(args.run_dir)
    rollouts = load_rollouts(args.run_dir)
    changes: list[str] = []
    if args.rules:
        overrides = parse_rule_args(args.rules)
        stored, data = data, rescore(data, overrides)
        changes = verdict_changes(stored, data)
        new = {r.rollout_id: r.metrics for r in data.rollouts}
        rollouts = [{**m, **new.get(str(m.get("rollout_id")), {})} for m in rollouts]
    from rig.analysis.groups import add_groups, check_tag_names, render_groups

    by = check_tag_names(args.by or [], "--by")
    cluster = check_tag_names([args.cluster], "--cluster")[0] if args.cluster else None
    opts: dict[str, Any] = dict(
        statuses=tuple(args.status or ("ok",)),
        confidence=args.confidence,
        include_invalid_timing=bool(args.include_invalid_timing),
        cluster=cluster,
    )
    report = aggregate(data, **opts)
    add_groups(report, data, by, **opts)
    if args.rules:
        report["rescored"] = {"rules": overrides, "verdict_changes": changes}
    from rig.scoring.report import print_scores, scores_for_report

    scores = scores_for_report(  # --score / --compare (scores.json), else the stored one
        args.run_dir,
        score=args.score,
        compare_to=args.compare,
        score_opt=args.score_opt,
        by=args.by,
        cluster=args.cluster,
        include_invalid=bool(args.include_invalid_timing),
        confidence=args.confidence,
    )
    results = check_gates(report, gates)
    written = _write_outputs(args, report, rollouts, results, scores)
    if args.json:
        values = gate_values(report)
        out = {**report, "rollouts": rollouts, "gate_values": values, "scores": scores}
        out["gates"] = [
            {"gate": r.gate.describe(), "value": r.value, "passed": r.passed, "note": r.note}
            for r in results
        ]
        print(json.dumps(out, indent=2, allow_nan=False))
        return _exit_status(args, rollouts, results)
    console = Console()
    for line in header_lines(data.manifest):
        console.print(line, markup=False, highlight=False, style="bold yellow")
    if args.rules:
        console.print(f"re-scored with {describe(overrides)}", markup=False, highlight=False)
        for line in changes:
            console.print(line, markup=False, highlight=False)

    def show(table: Any, legend: tuple[str, ...] = ()) -> None:
        print_table(console, table, wide=args.wide, legend=legend)

    if not args.no_rollouts:
        show(summary_table(rollouts), LEGEND)
    show(render_table(report))
    for table in render_groups(report):
        show(table)
    verdicts = verdicts_table(rollouts)
    if verdicts is not None:
        show(verdicts)
    decomposition = render_decomposition(report)
    if decomposition is not None:
        show(decomposition)
        show(clock_fit_table(rollouts))
    if report["timing_invalid"]:
        n = len(report["timing_invalid"])
        what = "left out of" if report["timing_invalid_excluded"] else "counted in"
        console.print(
            f"{n} rollout(s) whose own timing failed (timing_valid false) are {what} the "
            f"aggregates: {', '.join(report['timing_invalid'][:10])}" + (" ..." if n > 10 else ""),
            markup=False,
            style="bold red",
        )
    censored = report["overall"].get("censored")
    if censored:
        console.print(
            f"{censored} rollout(s) censored: a drain's cap or the rollout's cut the system "
            "while it was still talking (metrics.json `censored`)",
            markup=False,
        )
    rtt = rtt_table(rollouts)
    if rtt is not None:
        show(rtt, rtt_legend(rollouts))
    for table in (split_table(rollouts), proxy_table(rollouts)):
        if table is not None:
            show(table, PROXY_LEGEND if table.title and "proxy" in str(table.title) else ())
    print_scores(console, scores, show)
    print_closing(console, report, show)
    for line in wav_header_lines(args.run_dir, repair=args.repair_wav):
        console.print(line, markup=False, highlight=False)
    for path in written:
        console.print(f"wrote {path}", markup=False, highlight=False)
    return _exit_status(args, rollouts, results)


def _write_outputs(
    args: argparse.Namespace,
    report: dict[str, Any],
    rollouts: list[dict[str, Any]],
    results: list[Any],
    scores: dict[str, Any] | None = None,
) -> list[str]:
    written: list[str] = []
    if args.csv:
        from rig.reporting.tidy_csv import write_tidy_csv

        written += [str(p) for p in write_tidy_csv(args.run_dir, report, args.csv)]
    if args.junit:
        from rig.reporting.junit import write_junit

        try:
            from rig.scoring.render import junit_suites

            write_junit(args.junit, rollouts, results, run_id=str(report.get("run_id", "")),
                        extra_suites=junit_suites(scores))  # fmt: skip
        except OSError as exc:
            raise ConfigError(f"--junit {args.junit}: cannot write: {exc.strerror}") from exc
        written.append(args.junit)
    if args.otel:
        from rig.reporting.otel import ExportError, export_run
        from rig.runs.config import otel_endpoint

        endpoint = otel_endpoint()
        try:
            n = export_run(args.run_dir)
        except ExportError as exc:
            raise ExportError(f"--otel {endpoint}: {exc}") from exc
        written.append(f"{n} spans to {endpoint} (OTLP/HTTP)")
    if args.html:
        from rig.analysis.rollout import read_json
        from rig.reporting.html import build_html, write_html
        from rig.scoring.render import html_section

        if not 0 <= args.html_embed_max_mb <= 10_000:
            raise ConfigError(f"--html-embed-max-mb must be in [0, 10000], got "
                              f"{args.html_embed_max_mb}")  # fmt: skip
        from pathlib import Path

        text = build_html(
            args.run_dir,
            report,
            rollouts,
            results,
            manifest=read_json(Path(args.run_dir) / "manifest.json"),
            html_path=args.html,
            audio=args.html_audio,
            max_embed_mb=args.html_embed_max_mb,
            extra_html=html_section(scores),
        )
        try:
            write_html(args.html, text)
        except OSError as exc:
            raise ConfigError(f"--html {args.html}: cannot write: {exc.strerror}") from exc
        written.append(args.html)
    return written


def _exit_status(
    args: argparse.Namespace, rollouts: list[dict[str, Any]], results: list[Any]
) -> int:
    """0, 1 (a gate failed: one line each on stderr) or 3 (gated, and a rollout did not
    finish); without gates or --junit a readable run is 0, as before."""
    import sys

    from rig.cli import EXIT_FAILED, EXIT_OK, EXIT_ROLLOUTS_FAILED

    failed = [r for r in results if not r.passed]
    for r in results:
        if not r.passed or r.note:  # a passing gate says what it left out (n/a rollouts)
            print(f"rig report: {r.line()}", file=sys.stderr)
    if failed:
        return EXIT_FAILED
    if not (results or args.junit):
        return EXIT_OK
    from rig.status import is_done

    broken = [m for m in rollouts if not is_done(m.get("status"))]
    for m in broken:
        print(
            f"rig report: run error: {m.get('rollout_id')}: {m.get('status')}"
            + (f" ({m['reason']})" if m.get("reason") else ""),
            file=sys.stderr,
        )
    return EXIT_ROLLOUTS_FAILED if broken else EXIT_OK


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
        short = _short_span_note(fit)
        if short:
            drift = "-"
        note = (_steps_note(fit), fit.get("reason") or fit.get("error"), short)
        t.add_row(
            Text(str(m.get("rollout_id"))),
            Text(str(fit.get("method", "-"))),
            drift,
            f(fit.get("offset_err_ms"), 2),
            f(rtt.get("rtt_p50_ms"), 2),
            Text("; ".join(str(x) for x in note if x)),
        )
    return t


#: a drift whose error bar is wider than this and than half its value is not shown
DRIFT_ERR_MAX_PPM = 1000.0


def _short_span_note(fit: dict[str, Any]) -> str:
    """A drift fitted over too short a span is noise (e.g. -1112 ±3471 ppm over 2 s): say
    so instead of printing it; the offset, fitted as a constant, still holds."""
    drift, err = fit.get("drift_ppm"), fit.get("drift_err_ppm")
    if not isinstance(drift, int | float) or not isinstance(err, int | float):
        return ""
    if err <= DRIFT_ERR_MAX_PPM or abs(drift) >= 2 * err:
        return ""
    span = fit.get("span_s")
    over = f" ({span:.1f} s of probes)" if isinstance(span, int | float) else ""
    return f"not enough span to fit drift{over}"


def _steps_note(fit: dict[str, Any]) -> str:
    """Clock steps the probes proved (each stretch between them was fitted on its own)."""
    steps = fit.get("steps")
    if not isinstance(steps, list) or not steps:
        return ""
    jumps = ", ".join(f"{s.get('step_ms', 0):+.1f} ms" for s in steps if isinstance(s, dict))
    return f"clock stepped {jumps}; fitted per stretch"
