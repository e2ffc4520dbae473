"""The plain summary of a run: per rollout status, response latencies, send lateness, stalls.

Ids, statuses and reasons come from files and peers: they reach rich as `Text`, never as
markup (a server error `[/]` must print as `[/]`, not crash the table)."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rig import safejson
from rig.analysis.selfecho import rollouts_line
from rig.ids import count_retries, rollout_of_attempt
from rig.reporting.layout import print_table as laid_out


def load_rollouts(run_dir: str) -> list[dict[str, Any]]:
    out = []
    base = os.path.join(run_dir, "rollouts")
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    retries = count_retries(names)
    for name in names:
        if rollout_of_attempt(name) is not None:
            continue  # an earlier attempt, moved aside: counted as a retry below
        path = os.path.join(base, name, "metrics.json")
        try:
            with open(path, "rb") as f:
                loaded = safejson.parse(f.read())
            if not isinstance(loaded, dict):
                raise safejson.JsonInputError("not a JSON object")
            m: dict[str, Any] = loaded
        except FileNotFoundError:
            m = {"status": "incomplete", "reason": "no metrics.json (run interrupted?)"}
        except OSError as exc:
            m = {"status": "unreadable", "reason": f"{path}: cannot read: {exc.strerror}"}
        except ValueError as exc:
            m = {"status": "unreadable", "reason": f"{path}: {exc}"}
        m.setdefault("rollout_id", name)
        if retries.get(name):
            m["retries"] = retries[name]
        out.append(m)
    return out


def summary_table(rollouts: list[dict[str, Any]]) -> Table:
    t = Table(title="rollouts", show_lines=False)
    for col in (
        "rollout",
        "status",
        "latency ms",
        "late p50",
        "p99",
        "max",
        "stalls",
        "rig",
    ):
        # a status word is never cut (`analysis_error`): the reason after it wraps instead
        t.add_column(
            col,
            justify="left" if col in ("rollout", "status") else "right",
            min_width={"status": 14, "rig": 3}.get(col),
        )
    for m in rollouts:
        responses = m.get("responses")
        lat = [
            r.get("latency_ms")
            for r in (responses if isinstance(responses, list) else [])
            if isinstance(r, dict)
        ]
        lat_s = ", ".join(f"{x:.0f}" if _is_num(x) else "—" for x in lat) or "—"
        up = _obj(m.get("uplink"))
        late = _obj(up.get("lateness_ms"))

        def f(x: Any) -> str:
            return f"{x:.3f}" if _is_num(x) else "—"

        status = str(m.get("status", "?"))
        if m.get("reason") and status != "ok":
            status += f" ({str(m['reason'])[:60]})"
        if m.get("retries"):
            status += f" [{m['retries']} earlier attempt(s)]"
        t.add_row(
            Text(str(m.get("rollout_id"))),
            Text(str(status)),
            lat_s,
            f(late.get("p50")),
            f(late.get("p99")),
            f(late.get("max")),
            str(up.get("stalls", "—")),
            _timing_cell(m.get("timing_valid")),
        )
    return t


def _timing_cell(valid: Any) -> Text:
    """Column `rig`: the verdict on the rig's own timing (timing_valid, rig.core.selfcheck):
    `ok`, or `bad` in red (kept narrow: the status column holds the reasons)."""
    if valid is True:
        return Text("ok")
    if valid is False:
        return Text("bad", style="bold red")
    return Text("—")


def _obj(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


#: under the rollouts table: what its less obvious columns mean
LEGEND = (
    "late p50/p99/max: the rig's own uplink send lateness, ms · stalls: frames sent over one "
    "frame late · rig: the rig's own timing held (ok) or not (bad: left out of the "
    "aggregates; docs/pacing.md)",
)


def print_table(console: Console, table: Any, *, wide: bool = False, legend: Any = ()) -> None:
    """Print a table laid out for the console's width (rig.reporting.layout: stacked when
    it does not fit, never cut; `wide`: at its natural width)."""
    laid_out(console, table, wide=wide, legend=legend)


def print_summary(
    run_dir: str, console: Console | None = None, *, wide: bool = False
) -> list[dict[str, Any]]:
    console = console or Console()
    rollouts = load_rollouts(run_dir)
    print_table(console, summary_table(rollouts), wide=wide, legend=LEGEND)
    echo_line = rollouts_line(rollouts)  # runs with an echo condition
    if echo_line is not None:
        console.print(echo_line, markup=False)
    console.print(f"run directory: {run_dir}")
    return rollouts
