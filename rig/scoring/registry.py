"""The scorers by name, their options, and scores.json.

`score_run(run_dir, names, opts, ...)` runs scorers over a finished run directory and
returns the `scores.json` document; `write_scores` writes it at the run directory's top
level (never into the recordings), atomically (a temporary file, then `os.replace`), keeping
the entries of scorers not re-run. Each entry records its parameters (every default
filled in), the interval settings, the grouping, the word basis and what was left out, so
a result can be recomputed from its own record.

`--score-opt K=V` goes to every scorer named that has a parameter K (`pause_turn.K=V`
names one); values are parsed as the parameter's type; a key no named scorer has is an
error before anything is read.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.analysis.rollout import read_json
from rig.errors import ConfigError
from rig.scoring import eot_int, interaction, onset_distribution, pause_turn
from rig.scoring.measures import CI
from rig.scoring.rundir import ScoringRun, read_run

SCORES_FILE = "scores.json"
SCHEMA = 1


@dataclass(frozen=True, slots=True)
class Scorer:
    name: str
    params: type
    score: Callable[[ScoringRun, Any, CI, list[str]], dict[str, Any]]
    protocol: str


SCORERS: dict[str, Scorer] = {
    s.name: s
    for s in (
        Scorer("pause_turn", pause_turn.Params, pause_turn.score, "People Making Conversation"),
        Scorer("eot_int", eot_int.Params, eot_int.score, "TurnBench"),
        Scorer("interaction", interaction.Params, interaction.score, "InteractionBench"),
        Scorer(
            "onset_distribution",
            onset_distribution.Params,
            onset_distribution.score,
            "TACT",
        ),
    )
}


def check_names(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise ConfigError(f"unknown scorer {unknown[0]!r}; known: {', '.join(SCORERS)}")
    return list(dict.fromkeys(names))


def _coerce(name: str, key: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return low in ("true", "1", "yes")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError as exc:
        kind = type(default).__name__
        raise ConfigError(f"--score-opt {name}.{key}: want a {kind}, got {raw!r}") from exc
    return raw


def parse_opts(names: Sequence[str], pairs: Sequence[str]) -> dict[str, Any]:
    """Per scorer, its parameters object from the defaults and `K=V` / `NAME.K=V` pairs."""
    given: dict[str, dict[str, str]] = {n: {} for n in names}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--score-opt wants KEY=VALUE, got {pair!r}")
        target, dot, field = key.partition(".")
        scope = [target] if dot else list(names)
        field = field if dot else key
        if dot and target not in given:
            raise ConfigError(f"--score-opt {key}: {target!r} is not a scorer of this report")
        hit = False
        for n in scope:
            if field in {f.name for f in dataclasses.fields(SCORERS[n].params)}:
                given[n][field] = raw.strip()
                hit = True
        if not hit:
            raise ConfigError(
                f"--score-opt {key}: no parameter {field!r} in {', '.join(scope)} "
                "(docs/benchmarks.md, Scorers)"
            )
    out: dict[str, Any] = {}
    for n in names:
        cls = SCORERS[n].params
        defaults = cls()
        kw = {k: _coerce(n, k, v, getattr(defaults, k)) for k, v in given[n].items()}
        try:
            out[n] = cls(**kw)
        except TypeError as exc:
            raise ConfigError(f"--score-opt {n}: {exc}") from exc
    return out


def _basis(run: ScoringRun) -> dict[str, Any]:
    words = sum(1 for r in run.rollouts if r.basis == "words")
    vad = len(run.rollouts) - words
    note = None
    if vad:
        note = (
            f"{vad} of {len(run.rollouts)} rollout(s) have no ASR words (run with "
            "--asr-model, the asr extra): their VAD activity stands in for words, and "
            "wordless phonation cannot be told from speech"
        )
    return {"words": words, "vad": vad, "note": note}


def score_run(
    run: ScoringRun,
    names: Sequence[str],
    params: dict[str, Any],
    *,
    by: Sequence[str] = (),
    cluster: str | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int | None = None,
) -> dict[str, Any]:
    """The scores.json document of `names` over `run` (read by rig.scoring.rundir)."""
    ci = CI(confidence, n_resamples, run.seed if seed is None else seed, cluster)
    entries: dict[str, Any] = {}
    for name in names:
        p = params[name]
        result = SCORERS[name].score(run, p, ci, list(by))
        entries[name] = {
            "scorer": name,
            "protocol": SCORERS[name].protocol,
            "params": dataclasses.asdict(p),
            "intervals": dataclasses.asdict(ci),
            "by": list(by),
            "n_rollouts": len(run.rollouts),
            "excluded": run.excluded,
            "basis": _basis(run),
            **result,
        }
        if name == "eot_int" and p.export:
            _export(p.export, eot_int.export_list(result["units"]))
    return {"schema": SCHEMA, "run_dir": str(run.run_dir), "scorers": entries}


def _export(path: str, rows: list[dict[str, Any]]) -> None:
    try:
        _atomic_write(Path(path), json.dumps(rows, indent=1, allow_nan=False) + "\n")
    except OSError as exc:
        raise ConfigError(f"--score-opt export={path}: cannot write: {exc.strerror}") from exc


def read_scores(run_dir: str | Path) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / SCORES_FILE)


def write_scores(run_dir: str | Path, doc: dict[str, Any]) -> Path:
    """Write scores.json at the run's top level, keeping other scorers' stored entries."""
    path = Path(run_dir) / SCORES_FILE
    old = read_json(path)
    merged = dict(old.get("scorers") or {}) if old and isinstance(old.get("scorers"), dict) else {}
    merged.update(doc["scorers"])
    out = {**doc, "scorers": merged}
    if "compare" in doc or (old and "compare" in old):
        out["compare"] = doc.get("compare", (old or {}).get("compare"))
    _atomic_write(path, json.dumps(out, indent=1, allow_nan=False) + "\n")
    return path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def score_dir(
    run_dir: str | Path,
    names: Sequence[str],
    opts: Sequence[str] = (),
    *,
    include_invalid: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    """Read, score and return (nothing written): the Python face of `rig report --score`."""
    names = check_names(names)
    params = parse_opts(names, opts)
    return score_run(read_run(run_dir, include_invalid=include_invalid), names, params, **kw)
