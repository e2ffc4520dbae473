"""Check the output of the README's first command: the summary table lists every rollout of
the built-in demo suite, each with status `ok`, under the same column names as the README's
example of it ("What `rig demo` prints"), and the measured-vs-truth line is there.

Usage: .venv/bin/python scripts/ci/check_demo.py LOG [README]   (README default: README.md)
Exit 0 when it does; 1 with the reason otherwise. Reads the table as printed (rich box
characters, or `|` in an ASCII console), so it checks what a user sees, not a file.
"""

from __future__ import annotations

import re
import sys

ROW = re.compile(r"^\s*[│|┃](.*)[│|┃]\s*$")
HEADER = re.compile(r"^\s*┃(.*)┃\s*$")
TRUTH_LINE = "vs the reference system's own truth log"


def header_columns(text: str) -> list[str]:
    """The column names of the first table in `text` (rich's ┃ header rows). A table too wide
    for the console is printed stacked (rig.reporting.layout: each part repeats the key
    column), so the header rows that start with the same key column are one table."""
    out: list[str] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m is None:
            continue
        cells = [c.strip() for c in m.group(1).split("┃")]
        if not out:
            out = cells
        elif cells[0] == out[0]:
            out += [c for c in cells[1:] if c not in out]
    return out


def readme_demo_block(readme: str) -> str:
    """The fenced block after "What `rig demo` prints" in the README."""
    _, found, rest = readme.partition("What `rig demo` prints")
    if not found or "```" not in rest:
        return ""
    return rest.split("```", 2)[1]


def table_rows(text: str) -> dict[str, str]:
    """rollout id -> status cell, from every table row whose first cell is not a header."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m is None:
            continue
        cells = [c.strip() for c in re.split(r"[│|┃]", m.group(1))]
        if len(cells) >= 2 and cells[0] and cells[0] != "rollout":
            rows[cells[0]] = cells[1]
    return rows


def main(argv: list[str]) -> int:
    from rig.scenarios import resolve

    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        text = f.read()
    readme_path = argv[2] if len(argv) == 3 else "README.md"
    with open(readme_path, encoding="utf-8") as f:
        example = readme_demo_block(f.read())
    expected = [item.item_id for item in resolve("builtin:demo", 16_000)]
    rows = table_rows(text)
    problems = []
    for rid in expected:
        status = rows.get(rid)
        if status is None:
            problems.append(f"{rid}: not in the table")
        elif status != "ok":
            problems.append(f"{rid}: {status}")
    printed, documented = header_columns(text), header_columns(example)
    if printed != documented:
        problems.append(
            f"{readme_path}'s demo table has columns {documented}, rig demo prints {printed}: "
            "regenerate the README's example (COLUMNS=90 rig demo --headless)"
        )
    if TRUTH_LINE not in text:
        problems.append(f"no {TRUTH_LINE!r} line")
    elif TRUTH_LINE not in example:
        problems.append(f"{readme_path}'s demo example lacks the {TRUTH_LINE!r} line")
    if problems:
        print("demo check FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(
        f"demo check: {len(expected)} rollouts, all ok ({', '.join(sorted(expected))}); "
        f"columns as in {readme_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
