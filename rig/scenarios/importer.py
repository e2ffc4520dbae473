"""A table of corpus points (JSONL or CSV) -> a scenario suite (TOML), `rig import`.

How this works: one row is one item: an audio file with the channel and slice it plays,
reference marks, tags, per-item dialect options, history (text, or prefill audio with its
own slice and channels), the reference reply (text, or a spoken span of a file) and the
drain. `read_points` reads the rows (a JSONL line is an object; a CSV cell is text, with
`marks`, `history`, `prefill_channels`, `prefill_marks` as JSON, numbers as numbers, and
`tag.NAME` / `opt.NAME` columns for tags and options); `suite_document` turns them into the
scenario file's structure, with audio paths made relative to the output file; the result is
checked by the scenario file's own validation (rig.scenarios.fileformat.check_document), and
a problem is reported against the row (`points.csv: row 3 (c1-turn): steps[0].marks[1].end_s:
...`). `to_toml` writes the document. Nothing is decoded, nothing downloaded.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from typing import Any

from rig import safejson
from rig.errors import ScenarioError
from rig.scenarios.fileformat import check_document

#: columns (JSONL keys) of a points table; `tag.NAME` / `opt.NAME` columns besides
NUMBER_COLUMNS = (
    "start_s",
    "end_s",
    "prefill_start_s",
    "prefill_end_s",
    "prefill_speed",
    "pad_before_s",
    "pad_after_s",
    "drain_quiet_s",
    "drain_wait_first_s",
    "drain_max_s",
    "max_s",
    "reference_start_s",
    "reference_end_s",
    "reference_duration_s",
)
JSON_COLUMNS = ("marks", "history", "prefill_channels", "prefill_marks", "tags", "options")
TEXT_COLUMNS = (
    "id",
    "audio",
    "kind",
    "description",
    "label",
    "history_text",
    "prefill",
    "reference_text",
    "reference_file",
)
CHANNEL_COLUMNS = ("channel", "prefill_channel", "reference_channel")
INT_COLUMNS = ("reference_words",)
COLUMNS = (*TEXT_COLUMNS, *CHANNEL_COLUMNS, *NUMBER_COLUMNS, *JSON_COLUMNS, *INT_COLUMNS)
MAX_ROWS = 100_000
ROW_RE = re.compile(r"\Aitems\[(\d+)\]\.?(.*)\Z")


def _fail(source: str, row: int, reason: str, field: str | None = None) -> ScenarioError:
    return ScenarioError(source, reason, f"row {row}" + (f": {field}" if field else ""))


def read_points(path: str) -> list[dict[str, Any]]:
    """The rows of a .jsonl or .csv points table, values typed (numbers, JSON, channels)."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise ScenarioError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(path, f"cannot read: {exc}") from exc
    if path.lower().endswith(".jsonl"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = safejson.parse(line.encode(), max_bytes=1 << 20)
            except ValueError as exc:
                raise _fail(path, n, f"not a JSON object: {exc}") from None
            if not isinstance(obj, dict):
                raise _fail(path, n, "must be a JSON object")
            rows.append((n, obj))
    elif path.lower().endswith(".csv"):
        reader = csv.DictReader(text.splitlines())
        rows = [(n, _typed(path, n, raw)) for n, raw in enumerate(reader, 2)]
    else:
        raise ScenarioError(path, "a points table is a .jsonl or .csv file")
    if not rows:
        raise ScenarioError(path, "no points in the table")
    if len(rows) > MAX_ROWS:
        raise ScenarioError(path, f"at most {MAX_ROWS} points, got {len(rows)}")
    for n, row in rows:
        for key in row:
            base = key.split(".", 1)[0] + "." if "." in key else key
            if key not in COLUMNS and base not in ("tag.", "opt."):
                raise _fail(
                    path, n, f"unknown column; known: {', '.join(COLUMNS)}, tag.NAME, opt.NAME", key
                )
        row["_row"] = n
    return [r for _, r in rows]


def _typed(path: str, n: int, raw: dict[str | None, Any]) -> dict[str, Any]:
    """A CSV row: empty cells dropped, numbers, JSON cells and channels parsed."""
    out: dict[str, Any] = {}
    for key, cell in raw.items():
        if key is None:
            raise _fail(path, n, "more cells than the header has columns")
        if cell is None or cell == "":
            continue
        if key in NUMBER_COLUMNS:
            try:
                out[key] = float(cell)
            except ValueError:
                raise _fail(path, n, f"must be a number, got {cell!r}", key) from None
        elif key in JSON_COLUMNS or key.startswith("opt."):
            try:
                out[key] = safejson.parse(cell.encode())
            except ValueError as exc:
                if key.startswith("opt."):
                    out[key] = cell  # a plain string option
                    continue
                raise _fail(path, n, f"must be JSON: {exc}", key) from None
        elif key in CHANNEL_COLUMNS or key in INT_COLUMNS:
            out[key] = int(cell) if cell.strip().lstrip("-").isdigit() else cell
        else:
            out[key] = cell
    return out


def _rel(path: str, points_dir: str, out_dir: str) -> str:
    full = path if os.path.isabs(path) else os.path.join(points_dir, path)
    return os.path.relpath(full, out_dir)


def _item(row: dict[str, Any], points_dir: str, out_dir: str, source: str) -> dict[str, Any]:
    n = row["_row"]
    for key in ("id", "audio"):
        if key not in row:
            raise _fail(source, n, "required", key)
    turn: dict[str, Any] = {"type": "turn", "file": _rel(str(row["audio"]), points_dir, out_dir)}
    for key in ("start_s", "end_s", "channel", "marks", "label", "pad_before_s", "pad_after_s"):
        if key in row:
            turn[key] = row[key]
    drain: dict[str, Any] = {"type": "drain"}
    for key in ("quiet_s", "max_s", "wait_first_s"):
        if f"drain_{key}" in row:
            drain[key] = row[f"drain_{key}"]
    item: dict[str, Any] = {"id": row["id"], "steps": [turn, drain]}
    for key in (
        "kind",
        "description",
        "history",
        "history_text",
        "max_s",
        "prefill_speed",
        "prefill_start_s",
        "prefill_end_s",
        "prefill_channel",
        "prefill_channels",
        "prefill_marks",
    ):
        if key in row:
            item[key] = row[key]
    if "prefill" in row:
        item["prefill"] = _rel(str(row["prefill"]), points_dir, out_dir)
    tags = dict(row.get("tags") or {}) if isinstance(row.get("tags", {}), dict) else row["tags"]
    options = row.get("options", {})
    for key, v in row.items():
        if key.startswith("tag.") and isinstance(tags, dict):
            tags[key[4:]] = v if isinstance(v, str) else _plain_text(v)
        elif key.startswith("opt.") and isinstance(options, dict):
            options = {**options, key[4:]: v}
    if tags:
        item["tags"] = tags
    if options:
        item["options"] = options
    ref: dict[str, Any] = {}
    for key in ("text", "duration_s", "words", "start_s", "end_s", "channel"):
        if f"reference_{key}" in row:
            ref[key] = row[f"reference_{key}"]
    if "reference_file" in row:
        ref["file"] = _rel(str(row["reference_file"]), points_dir, out_dir)
    if ref:
        item["reference"] = ref
    return item


def _plain_text(v: Any) -> str:
    """A CSV tag cell that parsed as a number stays the text it was (c17, 3, 0.5 alike)."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def suite_document(
    rows: list[dict[str, Any]], points_path: str, out_path: str, name: str | None = None
) -> dict[str, Any]:
    """The scenario file's structure for `rows`, checked as `out_path` would be."""
    points_dir = os.path.dirname(os.path.abspath(points_path))
    out_dir = os.path.dirname(os.path.abspath(out_path))
    items = [_item(r, points_dir, out_dir, points_path) for r in rows]
    doc = {
        "suite": {"name": name or os.path.splitext(os.path.basename(out_path))[0]},
        "items": items,
    }
    try:
        check_document(doc, out_path)
    except ScenarioError as exc:
        m = ROW_RE.match(exc.field or "")
        if m is None:
            raise ScenarioError(points_path, exc.reason, exc.field) from None
        i, rest = int(m.group(1)), m.group(2)
        rest = rest.replace("steps[0].", "").replace("steps[1].", "drain_")
        where = f"row {rows[i]['_row']} ({rows[i].get('id')})" + (f": {rest}" if rest else "")
        raise ScenarioError(points_path, exc.reason, where) from None
    return doc


# -- TOML ------------------------------------------------------------------------------------

BARE_KEY = re.compile(r"\A[A-Za-z0-9_-]+\Z")


def _key(k: str) -> str:
    return k if BARE_KEY.match(k) else json.dumps(k, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML has no {v}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        inner = ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None)
        return "{ " + inner + " }" if inner else "{}"
    raise ValueError(f"no TOML form for {type(v).__name__}")


def to_toml(doc: dict[str, Any], header: str = "") -> str:
    lines = [f"# {line}" for line in header.splitlines()]
    lines += ["[suite]", *(f"{_key(k)} = {_value(v)}" for k, v in doc["suite"].items()), ""]
    for item in doc["items"]:
        lines.append("[[items]]")
        for k, v in item.items():
            if k == "steps":
                continue
            lines.append(f"{_key(k)} = {_value(v)}")
        lines.append("steps = [")
        lines += [f"  {_value(s)}," for s in item["steps"]]
        lines += ["]", ""]
    return "\n".join(lines)
