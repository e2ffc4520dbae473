"""Tables laid out for the width they are printed at (a terminal, a CI log of 80-120 columns).

How this works: every table of `rig report`, `rig run` and `rig demo` goes through
`print_table`. A table that fits the console's width prints as it is. One that does not is
never squeezed (rich would wrap cells to three lines and cut names to "downli…"): its
columns are stacked instead, into parts that each fit, every part repeating the first (key)
column, under the table's title printed once on a line of its own. `wide=True` (`rig report
--wide`) prints every table at its natural width, one line per row, for a wide terminal or a
log read by a program; `--json` stays the form for machines. A legend (what the columns
mean) prints under the table.

A new report section needs nothing more than a rich `Table` handed to `print_table`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

#: the most a table is ever laid out at, however wide the request (a pipe with --wide)
MAX_WIDTH = 1000


def natural_width(console: Console, table: Table) -> int:
    """The width the table takes with no cell wrapped."""
    options = console.options.update_width(MAX_WIDTH)
    return int(console.measure(table, options=options).maximum)


def _min_width(console: Console, table: Table) -> int:
    options = console.options.update_width(MAX_WIDTH)
    return int(console.measure(table, options=options).minimum)


def stack_columns(console: Console, table: Table, width: int) -> list[Table]:
    """The table as parts no wider than `width`: the first column in every part, the others
    in order, as many per part as fit; the last column (free text: a rule, a note) joins its
    part wrapped when its words fit, and a column that fits nowhere wraps in a part of its
    own."""
    if len(table.columns) <= 2 or natural_width(console, table) <= width:
        return [table]
    parts: list[list[int]] = []
    current: list[int] = [0]
    last = len(table.columns) - 1
    for i in range(1, len(table.columns)):
        trial = _part(table, [*current, i], None)
        fits = natural_width(console, trial) <= width
        if not fits and i == last:  # a free-text last column (a rule, a note) wraps instead
            alone = _min_width(console, _part(table, [i], None)) - 1  # its words, one border
            fits = natural_width(console, _part(table, current, None)) + alone <= width
        if len(current) > 1 and not fits:
            parts.append(current)
            current = [0, i]
        else:
            current.append(i)
    parts.append(current)
    out = [_part(table, idx, table.title if k == 0 else None) for k, idx in enumerate(parts)]
    if natural_width(console, out[-1]) > width:  # only the free-text last column may wrap
        out[-1].columns = [
            dataclasses.replace(c, no_wrap=True) if k < len(out[-1].columns) - 1 else c
            for k, c in enumerate(out[-1].columns)
        ]
    return out


def _part(table: Table, columns: Sequence[int], title: Any) -> Table:
    """A copy of `table` with only these columns (cells, styles and row styles kept)."""
    part = Table(
        title=title,
        title_justify=table.title_justify,
        title_style=table.title_style,
        box=table.box,
        show_header=table.show_header,
        show_lines=table.show_lines,
        header_style=table.header_style,
        expand=False,
    )
    part.columns = [
        dataclasses.replace(table.columns[i], _index=k, _cells=list(table.columns[i]._cells))
        for k, i in enumerate(columns)
    ]
    part.rows = list(table.rows)
    return part


def print_table(
    console: Console,
    table: Any,
    *,
    wide: bool = False,
    legend: Sequence[str] = (),
) -> None:
    """Print `table` laid out for the console's width (stacked when it does not fit), or
    with `wide` at its natural width; then its legend lines. Anything that is not a rich
    Table prints as it is."""
    if not isinstance(table, Table):
        console.print(table)
        return
    width = console.width
    if wide:
        width = min(MAX_WIDTH, max(width, natural_width(console, table)))
        saved = console.width
        console.width = width
        try:
            console.print(table)
            _legend(console, legend, soft=True)
        finally:
            console.width = saved
        return
    parts = stack_columns(console, table, width)
    if len(parts) > 1 and table.title:  # on a line of its own: not wrapped to a narrow part
        console.print(table.title, style="table.title", justify="left")
        parts[0].title = None
    for part in parts:
        console.print(part)
    _legend(console, legend)


def _legend(console: Console, lines: Sequence[str], soft: bool = False) -> None:
    for line in lines:
        console.print(line, markup=False, highlight=False, style="dim", soft_wrap=soft)
