"""Check the output of the README's first command: the summary table lists every rollout of
the built-in demo suite, each with status `ok`.

Usage: .venv/bin/python scripts/ci/check_demo.py LOG
Exit 0 when it does; 1 with the reason otherwise. Reads the table as printed (rich box
characters, or `|` in an ASCII console), so it checks what a user sees, not a file.
"""

from __future__ import annotations

import re
import sys

ROW = re.compile(r"^\s*[│|┃](.*)[│|┃]\s*$")


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

    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        text = f.read()
    expected = [item.item_id for item in resolve("builtin:demo", 16_000)]
    rows = table_rows(text)
    problems = []
    for rid in expected:
        status = rows.get(rid)
        if status is None:
            problems.append(f"{rid}: not in the table")
        elif status != "ok":
            problems.append(f"{rid}: {status}")
    if problems:
        print("demo check FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"demo check: {len(expected)} rollouts, all ok ({', '.join(sorted(expected))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
