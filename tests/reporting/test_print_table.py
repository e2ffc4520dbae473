"""A wide table printed into a pipe or file comes out whole, not cut at 80 columns (the demo
check and any log reader need the right-hand cells)."""

import io

import pytest
from rich.console import Console
from rich.table import Table

from rig.reporting.summary import print_table


def _wide_table() -> Table:
    t = Table(title="rollouts")
    for i in range(12):
        t.add_column(f"column{i}")
    t.add_row(*[f"value{i}" for i in range(12)])
    return t


def test_a_wide_table_into_a_pipe_keeps_every_column(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    console = Console(file=out)  # not a terminal: rich would assume 80 columns
    assert not console.is_terminal and console.width == 80
    print_table(console, _wide_table())
    text = out.getvalue()
    assert "value11" in text and "…" not in text
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert rows and all(line.rstrip().endswith("│") for line in rows)
    assert console.width == 80  # the console itself is left as it was


def test_columns_from_the_environment_are_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    out = io.StringIO()
    console = Console(file=out)
    print_table(console, _wide_table())
    assert max(len(line) for line in out.getvalue().splitlines()) <= 60
