"""Reference marks in a scenario file: `marks = [...]` on a turn step or `prefill_marks`.

How this works: each mark is a table, a point `{kind, t_s}` or a span `{kind, start_s,
end_s}` (seconds into that step's audio, after slicing), with an optional `label`:

  turn_end, eot, int         points (a turn end, the gold end of turn, an interruption anchor)
  pause, negative, exclude,  spans (a labelled pause, a span where taking the floor is wrong,
  region                     a span not scored, the scored region)
  anchor                     a point or a span, with a `label` (the word)

Checked before any audio is decoded, against the step's duration from the file headers:
unknown kinds and keys, a point given as a span (or the reverse), times outside the audio,
spans of one kind that overlap, an end of turn (`eot`, `turn_end`) strictly inside a
`negative` span (a real end of turn cannot lie where taking the floor is wrong). Every
problem is one ScenarioError naming the field (`items[0].steps[1].marks[2].end_s`).
`ref_marks` turns the checked marks into rig.core.refmarks.RefMark at the plan's rate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.core.refmarks import MARK_KINDS, POINT_KINDS, SPAN_KINDS, RefMark
from rig.errors import ScenarioError

MARK_KEYS = {"kind", "t_s", "start_s", "end_s", "label"}
MAX_MARKS = 10_000
MAX_LABEL = 200
#: a mark may sit this far past the end of its audio (rounding of a duration in seconds)
EDGE_S = 1e-6


def _num(source: str, t: dict[str, Any], key: str, where: str) -> float:
    v = t[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
        name = "a boolean" if isinstance(v, bool) else type(v).__name__
        raise ScenarioError(source, f"must be a number of seconds, got {name}", f"{where}.{key}")
    if v < 0:
        raise ScenarioError(source, f"must be >= 0, got {v}", f"{where}.{key}")
    return float(v)


def check_marks(
    source: str, raw: Any, where: str, duration_s: float | None
) -> list[dict[str, Any]]:
    """The marks of one step as plain data {mark, start_s, end_s, label}; `duration_s` is
    the step audio's length (None: not known yet, checked when decoded)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ScenarioError(source, "must be a list of mark tables", where)
    if len(raw) > MAX_MARKS:
        raise ScenarioError(source, f"at most {MAX_MARKS} marks, got {len(raw)}", where)
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        out.append(_one(source, m, f"{where}[{i}]", duration_s))
    _overlaps(source, out, where)
    return out


def check_keys(source: str, table: dict[str, Any], keys: frozenset[str] | set[str], w: str) -> None:
    """The one-line error for a key a benchmark field's table does not take."""
    unknown = sorted(set(table) - keys)
    if unknown:
        allowed = ", ".join(sorted(keys))
        raise ScenarioError(source, f"unknown key; allowed here: {allowed}", f"{w}.{unknown[0]}")


def _one(source: str, m: Any, w: str, duration_s: float | None) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise ScenarioError(source, "must be a table {kind, t_s} or {kind, start_s, end_s}", w)
    check_keys(source, m, MARK_KEYS, w)
    kind = m.get("kind")
    if not isinstance(kind, str) or kind not in MARK_KINDS:
        raise ScenarioError(source, f"{kind!r}: one of {', '.join(MARK_KINDS)}", f"{w}.kind")
    point, span = "t_s" in m, "start_s" in m or "end_s" in m
    if point and span:
        raise ScenarioError(source, "give t_s (a point) or start_s + end_s (a span), not both", w)
    if kind in POINT_KINDS and not point:
        raise ScenarioError(source, f"a {kind} mark is a point: give t_s", w)
    if kind in SPAN_KINDS and not span:
        raise ScenarioError(source, f"a {kind} mark is a span: give start_s and end_s", w)
    if not point and not span:
        raise ScenarioError(source, "give t_s (a point) or start_s + end_s (a span)", w)
    label = m.get("label")
    if label is not None and (not isinstance(label, str) or len(label) > MAX_LABEL):
        raise ScenarioError(
            source, f"must be a string of at most {MAX_LABEL} characters", f"{w}.label"
        )
    if kind == "anchor" and not label:
        raise ScenarioError(source, "an anchor mark needs a label (the word it anchors)", w)
    keys: tuple[str, ...]
    if point:
        start, end = _num(source, m, "t_s", w), None
        keys = ("t_s",)
    else:
        for key in ("start_s", "end_s"):
            if key not in m:
                raise ScenarioError(source, "required (a span has start_s and end_s)", f"{w}.{key}")
        start, end = _num(source, m, "start_s", w), _num(source, m, "end_s", w)
        if end <= start:
            raise ScenarioError(
                source, f"must be after start_s ({start:g}), got {end:g}", f"{w}.end_s"
            )
        keys = ("start_s", "end_s")
    if duration_s is not None:
        for key, v in zip(keys, (start, end), strict=False):
            if v is not None and v > duration_s + EDGE_S:
                raise ScenarioError(
                    source,
                    f"{v:g} s is past the end of the step's audio ({duration_s:g} s)",
                    f"{w}.{key}",
                )
    return {"mark": kind, "start_s": start, "end_s": end, "label": label}


def _overlaps(source: str, marks: list[dict[str, Any]], where: str) -> None:
    spans: dict[str, list[tuple[float, float, int]]] = {}
    for i, m in enumerate(marks):
        if m["end_s"] is not None:
            spans.setdefault(m["mark"], []).append((m["start_s"], m["end_s"], i))
    for kind, group in spans.items():
        group.sort()
        for (s0, e0, i0), (s1, _e1, i1) in zip(group, group[1:], strict=False):
            if s1 < e0:
                raise ScenarioError(
                    source,
                    f"{kind} span overlaps {kind} span marks[{i0}] ({s0:g}-{e0:g} s)",
                    f"{where}[{i1}]",
                )
    for i, m in enumerate(marks):
        if m["mark"] in ("eot", "turn_end") and m["end_s"] is None:
            for s, e, j in spans.get("negative", []):
                if s < m["start_s"] < e:
                    raise ScenarioError(
                        source,
                        f"an end of turn inside negative span marks[{j}] ({s:g}-{e:g} s): "
                        "taking the floor there cannot be both right and wrong",
                        f"{where}[{i}]",
                    )


def ref_marks(
    marks: list[dict[str, Any]], sample_rate: int, n_samples: int, step: int
) -> tuple[RefMark, ...]:
    """Checked marks at sample offsets of audio of `n_samples` at `sample_rate` (a time past
    the end by rounding lands on the end)."""
    out = []
    for m in marks:
        start = min(round(m["start_s"] * sample_rate), n_samples)
        end = None if m["end_s"] is None else min(round(m["end_s"] * sample_rate), n_samples)
        if end is not None and end <= start:
            end = min(start + 1, n_samples)
        out.append(RefMark(m["mark"], start, end, m["label"], step))
    return tuple(sorted(out, key=lambda r: r.start))
