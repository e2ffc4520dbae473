"""Item fields for benchmarks: `tags`, per-item dialect `options` and the `reference` reply.

How this works (all checked before any audio is decoded, one ScenarioError per problem):
  tags       {name = "value"} strings: what a report groups by (`rig report --by NAME`) and
             the bootstrap resamples (`--cluster NAME`); into metrics.json, the manifest and
             rig.load_run's tables
  options    dialect options for this item only (instructions, voice, endpointer knobs),
             merged over the run's `--dialect-opt`s; the dialect checks them before anything
             runs (rig.scenarios.runcheck), and each rollout records them (`options`)
  reference  the reply the item is scored against: `text` (its words counted), a spoken
             span of a file (`file`, `start_s`, `end_s`, `channel`: its duration), or an
             explicit `duration_s` / `words`; metrics.json `reference: {text, duration_s,
             words}` (null without one)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rig.errors import ScenarioError
from rig.ids import ID
from rig.scenarios.marks import check_keys
from rig.scenarios.slices import check_slice

MAX_TAGS = 64
MAX_TAG_VALUE = 256
#: options a scenario item may not set: the rig sets them itself
RESERVED_OPTIONS = frozenset({"history", "own_track", "sample_rate"})
MAX_TEXT = 100_000
REFERENCE_KEYS = {"text", "duration_s", "words", "file", "start_s", "end_s", "channel"}


def check_tags(source: str, raw: Any, where: str) -> dict[str, str]:
    w = f"{where}.tags"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(source, 'must be a table of strings, e.g. {conversation = "c17"}', w)
    if len(raw) > MAX_TAGS:
        raise ScenarioError(source, f"at most {MAX_TAGS} tags, got {len(raw)}", w)
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not ID.match(k):
            raise ScenarioError(
                source, "tag names: 1-128 letters, digits, '_', '-', '.'", f"{w}.{k}"
            )
        if not isinstance(v, str):
            got = "a boolean" if isinstance(v, bool) else type(v).__name__
            raise ScenarioError(
                source, f'must be a string (quote it: "{v}"), got {got}', f"{w}.{k}"
            )
        if not v or len(v) > MAX_TAG_VALUE:
            raise ScenarioError(source, f"must be 1-{MAX_TAG_VALUE} characters", f"{w}.{k}")
        out[k] = v
    return out


def _plain(v: Any) -> bool:
    if v is None or isinstance(v, str | bool | int):
        return True
    if isinstance(v, float):
        return bool(np.isfinite(v))
    if isinstance(v, list):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def check_options(source: str, raw: Any, where: str) -> dict[str, Any]:
    w = f"{where}.options"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(source, "must be a table of dialect options", w)
    for k, v in raw.items():
        if k in RESERVED_OPTIONS:
            why = "give the item's `history`" if k == "history" else "the rig sets it"
            raise ScenarioError(source, f"not an item option: {why}", f"{w}.{k}")
        if not _plain(v):
            raise ScenarioError(source, "must be a string, number, boolean or list", f"{w}.{k}")
    return dict(raw)


def check_reference(source: str, raw: Any, where: str, base_dir: str) -> dict[str, Any] | None:
    """metrics.json's `reference` {text, duration_s, words} (+ `audio` for a spoken span)."""
    w = f"{where}.reference"
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = {"text": raw}
    if not isinstance(raw, dict):
        raise ScenarioError(source, "must be a table {text, duration_s, words, file, ...}", w)
    check_keys(source, raw, REFERENCE_KEYS, w)
    text = raw.get("text")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT):
        raise ScenarioError(
            source, f"must be a string of at most {MAX_TEXT} characters", f"{w}.text"
        )
    out: dict[str, Any] = {"text": text, "duration_s": None, "words": None}
    if text:
        out["words"] = len(text.split())
    if "file" in raw:
        f = raw["file"]
        if not isinstance(f, str) or not f:
            raise ScenarioError(source, "must be an audio file path", f"{w}.file")
        path = f if os.path.isabs(f) else os.path.join(base_dir, f)
        if not os.path.isfile(path):
            raise ScenarioError(source, f"audio file not found: {path}", f"{w}.file")
        span = check_slice(source, raw, w, path)
        out["duration_s"] = round(span["duration_s"], 6)
        out["audio"] = {
            "path": path,
            "start_s": span["start_s"],
            "end_s": span["end_s"],
            "channel": span["channel"],
        }
    else:
        for key in ("start_s", "end_s", "channel"):
            if key in raw:
                raise ScenarioError(source, "only with `file` (a spoken reference)", f"{w}.{key}")
    if "duration_s" in raw:
        v = raw["duration_s"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v) or v < 0:
            raise ScenarioError(source, f"must be a number >= 0, got {v!r}", f"{w}.duration_s")
        out["duration_s"] = float(v)
    if "words" in raw:
        v = raw["words"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ScenarioError(source, f"must be an integer >= 0, got {v!r}", f"{w}.words")
        out["words"] = v
    if out["text"] is None and out["duration_s"] is None and out["words"] is None:
        raise ScenarioError(source, "give text, duration_s, words or a spoken span (file)", w)
    return out
