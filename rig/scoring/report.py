"""The `rig report` hook: score when asked, write scores.json, show what is stored.

`scores_for_report(run_dir, ...)` runs the scorers `--score` names (and `--compare`), writes
RUN/scores.json and returns the document; without `--score` it returns the stored
scores.json (None when there is none), so the text, HTML, JUnit and CSV outputs show the
run's scores either way. `print_scores` prints the tables and their notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rig.analysis.groups import check_tag_names
from rig.errors import ConfigError
from rig.scoring.compare import compare
from rig.scoring.measures import CI
from rig.scoring.registry import check_names, parse_opts, read_scores, score_run, write_scores
from rig.scoring.render import text_tables
from rig.scoring.rundir import read_run


def scores_for_report(
    run_dir: str,
    *,
    score: list[str] | None = None,
    compare_to: str | None = None,
    score_opt: list[str] | None = None,
    by: list[str] | None = None,
    cluster: str | None = None,
    include_invalid: bool = False,
    confidence: float = 0.95,
) -> dict[str, Any] | None:
    """`rig report`'s options, as values (the CLI reads its own Namespace)."""
    names = check_names(list(score or []))
    if not names and not compare_to:
        return read_scores(run_dir)
    if compare_to and not Path(compare_to).is_dir():
        raise ConfigError(f"--compare {compare_to}: not a run directory")
    want = list(names)
    if compare_to and "onset_distribution" not in want:
        want.append("onset_distribution")
    params = parse_opts(want, list(score_opt or []))
    tags = check_tag_names(by or [], "--by")
    cluster_tag = check_tag_names([cluster], "--cluster")[0] if cluster else None
    level = float(confidence)
    run = read_run(run_dir, include_invalid=include_invalid)
    doc = score_run(run, names, params, by=tags, cluster=cluster_tag, confidence=level)
    if compare_to:
        other = read_run(compare_to, include_invalid=include_invalid)
        ci = CI(level, 2000, run.seed, cluster_tag)
        doc["compare"] = compare(run, other, params["onset_distribution"], ci, tags)
    try:
        doc["written"] = str(write_scores(run_dir, doc))
    except OSError as exc:
        raise ConfigError(f"{run_dir}: cannot write scores.json: {exc.strerror}") from exc
    return doc


def print_scores(console: Any, doc: dict[str, Any] | None, show: Any = None) -> None:
    """The scorers' tables; `show` prints a table (rig report: laid out for the width)."""
    if not doc:
        return
    for part in text_tables(doc):
        if isinstance(part, str):
            console.print(part, markup=False, highlight=False)
        else:
            (show or console.print)(part)
    if doc.get("written"):
        console.print(f"wrote {doc['written']}", markup=False, highlight=False)
