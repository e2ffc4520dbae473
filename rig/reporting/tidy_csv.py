"""`rig report --csv DIR`: rollouts.csv, responses.csv (tidy, one row each), summary.csv and,
when the run has scores.json (`--score`), scores.csv.

rollouts.csv and responses.csv are rig.analysis.tables' rows: plain columns (numbers,
strings, true/false, empty for none), so `pandas.read_csv` reads them as they are.
summary.csv is the aggregate per scenario and item (the old `--csv FILE` output).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rig.analysis.aggregate import to_csv
from rig.analysis.scorerows import SCORE_COLUMNS
from rig.analysis.tables import RESPONSE_COLUMNS, ROLLOUT_COLUMNS, load_rows
from rig.errors import ConfigError


def _write(path: Path, rows: list[dict[str, Any]], first: tuple[str, ...]) -> None:
    columns = list(first) + sorted({k for r in rows for k in r} - set(first))
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(v) for k, v in r.items()})


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def write_tidy_csv(run_dir: str | Path, report: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write the three files into `out_dir` (created); returns their paths."""
    out = Path(out_dir)
    if out.suffix.lower() == ".csv" and not out.is_dir():
        raise ConfigError(
            f"--csv takes a directory now ({out} looks like a file): it writes rollouts.csv, "
            "responses.csv and summary.csv there (docs/api.md)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--csv {out}: cannot create the directory: {exc.strerror}") from exc
    rows = load_rows(run_dir, chunks=False)
    paths = [out / "rollouts.csv", out / "responses.csv", out / "summary.csv"]
    _write(paths[0], rows["rollouts"], ROLLOUT_COLUMNS)
    _write(paths[1], rows["responses"], RESPONSE_COLUMNS)
    paths[2].write_text(to_csv(report), encoding="utf-8")
    if rows["scores"]:  # rig report --score: scores.json, one row per scorer/group/metric
        paths.append(out / "scores.csv")
        _write(paths[-1], rows["scores"], SCORE_COLUMNS)
    return paths
