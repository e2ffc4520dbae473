"""Scores for people and CI: text tables (rich), an HTML section, JUnit suites.

All three read the scores.json document (rig.scoring.registry) and nothing else: one row
per group and metric, the value with its interval and how the interval was made. Every
text from files passes through `html.escape` (HTML) or ElementTree (JUnit).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import escape
from typing import Any

from rich.table import Table
from rich.text import Text

from rig.analysis.scorerows import score_rows


def fmt(metric: str, x: Any) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool):
        return "–"
    if metric.endswith("_ms"):
        return f"{x:.0f}"
    if metric.endswith("_rate") or metric.endswith("_recall") or metric.endswith("_fpr"):
        return f"{x:.3f}"
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.0f}"


def _ci(row: dict[str, Any]) -> str:
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if lo is None or hi is None:
        return "–"
    out = f"[{fmt(row['metric'], lo)}, {fmt(row['metric'], hi)}]"
    if row.get("boot_ci_low") is not None:
        lo, hi = fmt(row["metric"], row["boot_ci_low"]), fmt(row["metric"], row["boot_ci_high"])
        out += f" boot [{lo}, {hi}]"
    return out


def _method(row: dict[str, Any]) -> str:
    return str(row.get("ci_method") or "none")


def _rows_of(doc: dict[str, Any], scorer: str) -> list[dict[str, Any]]:
    return [
        r
        for r in score_rows({"scorers": {scorer: doc["scorers"][scorer]}})
        if r["n"] not in (0, None)
    ]


def _caption(entry: dict[str, Any]) -> list[str]:
    lines = []
    ex = entry.get("excluded") or {}
    if ex.get("timing_invalid"):
        what = "included" if ex.get("timing_invalid_included") else "left out"
        lines.append(
            f"{ex['timing_invalid']} rollout(s) with timing_valid false {what}"
            + ("" if ex.get("timing_invalid_included") else " (--include-invalid)")
        )
    for status, n in sorted((ex.get("status") or {}).items()):
        lines.append(f"{n} rollout(s) not scored: status {status}")
    note = (entry.get("basis") or {}).get("note")
    if note:
        lines.append(note)
    return lines


def text_tables(doc: dict[str, Any]) -> list[Any]:
    """A rich Table per scorer (and one for --compare), with its notes as plain strings."""
    out: list[Any] = []
    for name, entry in doc.get("scorers", {}).items():
        p = entry.get("params", {})
        opts = ", ".join(f"{k}={v}" for k, v in p.items() if v not in ("", None))
        t = Table(title=f"score {name} ({entry.get('protocol')}): {opts}", title_justify="left")
        level = f"{_level(entry):.0%} CI"
        t.add_column("metric", justify="left", no_wrap=True)
        for col in ("value", level, "n"):
            t.add_column(col, justify="right", no_wrap=col != level)
        group = None
        for r in _rows_of(doc, name):
            if r["group"] != group:
                if group is not None:
                    t.add_section()
                group = r["group"]
                t.add_row(Text(group, style="bold"), "", "", "")
            metric = r["metric"] + (f" {r['variant']}" if r["variant"] else "")
            if r.get("change") is not None:
                metric += f" (change {r['change']:+.3f})"
            n = f"{r['k']}/{r['n']}" if r.get("k") is not None else str(r["n"])
            t.add_row(Text(metric), fmt(r["metric"], r["value"]), Text(_ci(r)), n)
        out.append(t)
        methods = sorted({_method(r) for r in _rows_of(doc, name)})
        out.append(f"intervals: {'; '.join(methods)}")
        out.extend(_caption(entry))
    comp = doc.get("compare")
    if isinstance(comp, dict):
        t = Table(title=f"compare onsets with {comp.get('run_b')}", title_justify="left")
        for col in ("group", "items", "JS distance", "95% CI"):
            t.add_column(col, justify="left" if col == "group" else "right")
        for g in comp.get("groups", []):
            m = (g.get("metrics") or {}).get("js_distance") or {}
            label = ", ".join(f"{k}={v}" for k, v in (g.get("group") or {}).items()) or "all"
            t.add_row(Text(label), str(g.get("n_items")), fmt("js", m.get("value")),
                      Text(_ci({"metric": "js", **m})))  # fmt: skip
        out.append(t)
        out.append(
            f"{comp.get('n_items_common')} item(s) in both runs; "
            f"{comp.get('only_in_a')} only in this run, {comp.get('only_in_b')} only in the other"
        )
    return out


def _level(entry: dict[str, Any]) -> float:
    return float((entry.get("intervals") or {}).get("confidence", 0.95))


def html_section(doc: dict[str, Any] | None) -> str:
    """`<h2>Scores</h2>` and one table per scorer; empty when nothing was scored."""
    if not doc or not doc.get("scorers"):
        return ""
    parts = ["<h2>Scores</h2>"]
    for name, entry in doc["scorers"].items():
        parts.append(f"<h3>{escape(name)} <span class=muted>({escape(str(entry.get('protocol')))})"
                     "</span></h3>")  # fmt: skip
        parts.append(f"<p class=muted>parameters: {escape(str(entry.get('params')))}</p>")
        for line in _caption(entry):
            parts.append(f"<p class=bad>{escape(line)}</p>")
        head = "".join(
            f'<th class="{"l" if c in ("group", "metric", "interval") else ""}">{c}</th>'
            for c in ("group", "metric", "value", "CI", "n", "interval")
        )
        body = []
        for r in _rows_of(doc, name):
            metric = r["metric"] + (f" {r['variant']}" if r["variant"] else "")
            cells = (r["group"], metric, fmt(r["metric"], r["value"]), _ci(r), r["n"], _method(r))
            body.append(
                "<tr>"
                + "".join(
                    f'<td class="{"l" if i in (0, 1, 5) else ""}">{escape(str(c))}</td>'
                    for i, c in enumerate(cells)
                )
                + "</tr>"
            )
        parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table>")
    return "\n".join(parts)


_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(s: Any) -> str:
    """Text XML 1.0 can carry (item ids and tags come from files)."""
    return _BAD_XML.sub("\ufffd", str(s))


def junit_suites(doc: dict[str, Any] | None) -> list[ET.Element]:
    """A suite per scorer: a case per group metric (its value in system-out) and, for
    `interaction`, a case per scored item that fails when the item's window was missed."""
    suites: list[ET.Element] = []
    for name, entry in ((doc or {}).get("scorers") or {}).items():
        suite = ET.Element("testsuite", name=f"rig.score.{name}")
        n = failures = 0
        for r in _rows_of(doc or {}, name):
            case = ET.SubElement(
                suite, "testcase", classname=f"rig.score.{name}",
                name=_x(f"{r['group']}: {r['metric']} {r['variant']}".strip()),
            )  # fmt: skip
            out = ET.SubElement(case, "system-out")
            out.text = _x(f"value={r['value']} ci=[{r['ci_low']}, {r['ci_high']}] n={r['n']}")
            n += 1
        if name == "interaction":
            for u in entry.get("units") or []:
                case = ET.SubElement(
                    suite, "testcase", classname=f"rig.score.{name}.{u.get('mark')}",
                    name=_x(u.get("rollout")),
                )  # fmt: skip
                n += 1
                if u.get("pass") is False:
                    failures += 1
                    el = ET.SubElement(case, "failure", type=str(u.get("mark")),
                                       message=_x(u.get("why")))  # fmt: skip
                    el.text = _x(u.get("why"))
        suite.set("tests", str(n))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suites.append(suite)
    return suites
