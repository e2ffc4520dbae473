"""Scenario files (TOML, or JSON with the same structure) -> scripted scenario items.

How this works: a file is one suite: `[suite]` (name, description), `[defaults]` and a list
of `[[items]]`. Each item has an `id`, a `kind` (its timing category, which picks the pass
rule), optional history (`prefill` audio sent at `prefill_speed`, text `history` or
`history_text`), a hard cap `max_s`, optional
`rules` (timing thresholds) and `steps`. Steps map onto director steps:

  turn     {file | files + gap_s, pad_before_s, pad_after_s, label, barge_in}
           -> Pause(pad_before) + Play(role=turn) + Pause(pad_after)
  pause    {seconds}                             -> Pause
  release  {quiet_s, timeout_s}                  -> WaitQuiet (playback clock)
  inject   {role, file, offset_s | after_s, timeout_s, label, barge_in}
           -> WaitOnset(offset_s) + Play(role)   (offset from the reply onset as played)
           -> Pause(after_s) + Play(role)        (after the previous step)
  drain    {quiet_s, max_s, wait_first_s}        -> Drain
Benchmark fields (rig.scenarios.benchitem): turn `start_s`/`end_s`/`channel` (a slice of one
file) and `marks`; item `tags`, `options`, `reference`, and the prefill's slice, channels
and marks. An item whose last step is not a drain gets one from the defaults. Everything is checked
before any audio is decoded, and every problem is a ScenarioError naming the file and the
field (`items[2].steps[1].offset_s`). Audio paths are relative to the scenario file.
The item's rules and steps (as data) go into its meta, so the manifest records them.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import fields
from typing import Any

import numpy as np

from rig import safejson
from rig.analysis.timing import KINDS, TimingParams
from rig.audio.pcm import Pcm16
from rig.audio.source import load_wav
from rig.conditions.spec import parse as parse_condition
from rig.core.director import Drain, Pause, Play, Step, WaitOnset, WaitQuiet
from rig.core.plan import UserPlan, speech_bounds
from rig.dialects.history import check_history
from rig.echo.spec import scenario_echo
from rig.errors import AudioInputError, ConfigError, ScenarioError
from rig.ids import ID
from rig.scenarios.benchitem import (
    ITEM_FIELDS,
    TURN_FIELDS,
    item_fields,
    prefill_play,
    slice_pcm,
    turn_fields,
)
from rig.scenarios.fieldcheck import FieldCheck as _Check
from rig.scenarios.fieldcheck import type_name as _tname
from rig.scenarios.item import ScenarioItem
from rig.scenarios.marks import ref_marks

ITEM_KINDS: tuple[str, ...] = (*KINDS, "free")
INJECT_ROLES = ("interruption", "backchannel")
ID_RE = ID  # rig.ids: one safe path part, matched with \A...\Z
#: durations that become audio (pads, gaps, pauses) or offsets; caps (max_s, timeouts) may
#: be longer. Beyond these a file is refused, not allocated.
MAX_FILE_BYTES = 16 << 20

SUITE_KEYS = {"name", "description"}
DEFAULT_KEYS = {
    "pad_before_s",
    "pad_after_s",
    "max_s",
    "drain_quiet_s",
    "drain_max_s",
    "drain_wait_first_s",
    "rules",
}
ITEM_KEYS = {
    "id",
    "kind",
    "description",
    "prefill",
    "prefill_speed",
    "history",
    "history_text",
    "max_s",
    "rules",
    "steps",
    "pad_before_s",
    "pad_after_s",
    *ITEM_FIELDS,
    "condition",
    "echo",  # the echo condition (rig.echo.spec.scenario_echo)
}
STEP_KEYS: dict[str, set[str]] = {
    "turn": {"file", "files", "gap_s", "pad_before_s", "pad_after_s", "label", "barge_in"}
    | TURN_FIELDS,
    "pause": {"seconds"},
    "release": {"quiet_s", "timeout_s"},
    "inject": {"role", "file", "offset_s", "after_s", "timeout_s", "label", "barge_in"},
    "drain": {"quiet_s", "max_s", "wait_first_s"},
}
#: steps that play audio take a `condition` (rig.conditions.spec)
CONDITION_STEPS = ("turn", "inject")
BUILTIN_DEFAULTS: dict[str, Any] = {
    "pad_before_s": 0.5,
    "pad_after_s": 0.0,
    "max_s": 120.0,
    "drain_quiet_s": 1.5,
    "drain_max_s": 30.0,
    "drain_wait_first_s": 0.0,
    "rules": {},
}
RULE_FIELDS = {f.name for f in fields(TimingParams)} - {"activity"}


def parse_file(path: str) -> dict[str, Any]:
    """The raw document of a .toml or .json scenario file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ScenarioError(path, "no such file") from None
    except OSError as exc:
        raise ScenarioError(path, f"cannot read: {exc.strerror}") from exc
    try:
        if path.lower().endswith(".json"):
            doc = safejson.parse(raw, max_bytes=MAX_FILE_BYTES)
        else:
            if len(raw) > MAX_FILE_BYTES:
                raise safejson.JsonInputError(f"{len(raw)} bytes (at most {MAX_FILE_BYTES})")
            doc = tomllib.loads(raw.decode("utf-8"))
            safejson.check_depth(doc)
    except RecursionError:
        raise ScenarioError(path, "does not parse: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError is a ValueError
        raise ScenarioError(path, f"does not parse: {exc}") from None
    if not isinstance(doc, dict):
        raise ScenarioError(path, f"top level must be a table, got {_tname(doc)}")
    return doc


def load_scenario_file(
    path: str, sample_rate: int, *, scenario: str | None = None
) -> list[ScenarioItem]:
    """Validate a scenario file and build its items (audio decoded at `sample_rate`)."""
    return build_items(parse_file(path), path, sample_rate, scenario=scenario)


def build_items(
    doc: dict[str, Any], source: str, sample_rate: int, *, scenario: str | None = None
) -> list[ScenarioItem]:
    name, specs = check_document(doc, source)
    c = _Check(source)
    cache: dict[Any, Pcm16] = {}
    return [_build(c, s, sample_rate, scenario or name, cache) for s in specs]


def check_document(doc: dict[str, Any], source: str) -> tuple[str, list[dict[str, Any]]]:
    """Validate a scenario document (no audio decoded): the suite name and item specs."""
    c = _Check(source)
    c.table(doc, "", {"suite", "defaults", "items"})
    suite = c.table(doc.get("suite", {}), "suite", SUITE_KEYS)
    name = c.string(suite, "name", "suite", os.path.splitext(os.path.basename(source))[0])
    defaults = _defaults(c, doc.get("defaults", {}))
    items_raw = doc.get("items")
    if not isinstance(items_raw, list) or not items_raw:
        raise c.fail("items", "must be a non-empty list of item tables")
    base_dir = os.path.dirname(os.path.abspath(source))
    specs = [_item(c, raw, f"items[{i}]", defaults, base_dir) for i, raw in enumerate(items_raw)]
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s["id"] in seen:
            raise c.fail(f"items[{i}].id", f"duplicate id {s['id']!r}")
        seen.add(s["id"])
    return name, specs


# -- validation (no audio decoded yet) -------------------------------------------------------


def _defaults(c: _Check, raw: Any) -> dict[str, Any]:
    t = c.table(raw, "defaults", DEFAULT_KEYS)
    d = dict(BUILTIN_DEFAULTS)
    for key in ("pad_before_s", "pad_after_s", "drain_quiet_s", "drain_wait_first_s"):
        d[key] = c.number(t, key, "defaults", d[key], pos=False)
    for key in ("max_s", "drain_max_s"):
        d[key] = c.number(t, key, "defaults", d[key], pos=True)
    d["rules"] = _rules(c, t.get("rules", {}), "defaults.rules")
    return d


def _rules(c: _Check, raw: Any, where: str) -> dict[str, Any]:
    t = c.table(raw, where, RULE_FIELDS)
    out: dict[str, Any] = {}
    for key, v in t.items():
        if key == "min_backchannels":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise c.fail(f"{where}.{key}", f"must be an integer >= 0, got {v!r}")
            out[key] = v
        else:
            out[key] = c.number(t, key, where, pos=False)
    return out


def _audio_path(c: _Check, base_dir: str, value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise c.fail(where, f"must be an audio file path, got {_tname(value)}")
    path = value if os.path.isabs(value) else os.path.join(base_dir, value)
    if not os.path.isfile(path):
        raise c.fail(where, f"audio file not found: {path}")
    return path


def _item(
    c: _Check, raw: Any, where: str, defaults: dict[str, Any], base_dir: str
) -> dict[str, Any]:
    t = c.table(raw, where, ITEM_KEYS)
    item_id = c.string(t, "id", where)
    if not ID_RE.match(item_id):
        raise c.fail(f"{where}.id", f"{item_id!r}: use 1-128 letters, digits, '_', '-', '.'")
    kind = c.string(t, "kind", where, "free").strip().lower().replace("-", "_")
    if kind not in ITEM_KINDS:
        raise c.fail(f"{where}.kind", f"{kind!r}: one of {', '.join(ITEM_KINDS)}")
    local = {
        **defaults,
        "pad_before_s": c.number(t, "pad_before_s", where, defaults["pad_before_s"], pos=False),
        "pad_after_s": c.number(t, "pad_after_s", where, defaults["pad_after_s"], pos=False),
    }
    spec: dict[str, Any] = {
        "id": item_id,
        "kind": kind,
        "description": c.string(t, "description", where, ""),
        "max_s": c.number(t, "max_s", where, defaults["max_s"], pos=True),
        "rules": {**defaults["rules"], **_rules(c, t.get("rules", {}), f"{where}.rules")},
        "prefill": (
            _audio_path(c, base_dir, t["prefill"], f"{where}.prefill") if "prefill" in t else None
        ),
        "prefill_speed": c.number(t, "prefill_speed", where, 4.0, pos=True, hi=1000.0),
        "history": _history(c, t, where),
        "condition": _condition(c, t, where, base_dir),
        "echo": _echo(c, t, where, base_dir),
    }
    spec |= item_fields(c.source, t, where, base_dir, spec["prefill"])
    if spec["prefill_speed"] < 1:
        speed = spec["prefill_speed"]
        raise c.fail(f"{where}.prefill_speed", f"must be >= 1 (x real time), got {speed}")
    steps_raw = t.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise c.fail(f"{where}.steps", "must be a non-empty list of step tables")
    steps = [_step(c, s, f"{where}.steps[{i}]", local, base_dir) for i, s in enumerate(steps_raw)]
    if steps[-1]["type"] != "drain":
        steps.append(
            {
                "type": "drain",
                "quiet_s": local["drain_quiet_s"],
                "max_s": local["drain_max_s"],
                "wait_first_s": local["drain_wait_first_s"],
            }
        )
    spec["steps"] = steps
    return spec


def _echo(c: _Check, t: dict[str, Any], where: str, base_dir: str) -> str | None:
    if "echo" not in t:
        return None
    try:
        return scenario_echo(t["echo"], base_dir)
    except ConfigError as exc:
        raise c.fail(f"{where}.echo", str(exc)) from None


def _step(c: _Check, raw: Any, where: str, local: dict[str, Any], base_dir: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise c.fail(where, f"must be a table, got {_tname(raw)}")
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in STEP_KEYS:
        raise c.fail(f"{where}.type", f"{kind!r}: one of {', '.join(STEP_KEYS)}")
    t = c.table(raw, where, STEP_KEYS[kind] | {"type"} | _conditioned(kind))
    s: dict[str, Any] = {"type": kind, "condition": _condition(c, t, where, base_dir)}
    if kind == "turn":
        if ("file" in t) == ("files" in t):
            raise c.fail(where, "give exactly one of `file` or `files`")
        if "files" in t:
            files = t["files"]
            if not isinstance(files, list) or not files:
                raise c.fail(f"{where}.files", "must be a non-empty list of audio files")
            s["files"] = [
                _audio_path(c, base_dir, f, f"{where}.files[{i}]") for i, f in enumerate(files)
            ]
        else:
            s["files"] = [_audio_path(c, base_dir, t["file"], f"{where}.file")]
        if "gap_s" in t and "files" not in t:
            raise c.fail(f"{where}.gap_s", "only with `files` (silence between them)")
        s["gap_s"] = c.number(t, "gap_s", where, 0.0, pos=False)
        s["pad_before_s"] = c.number(t, "pad_before_s", where, local["pad_before_s"], pos=False)
        s["pad_after_s"] = c.number(t, "pad_after_s", where, local["pad_after_s"], pos=False)
        s["label"] = c.string(t, "label", where, _stem(s["files"][0]))
        s["barge_in"] = c.boolean(t, "barge_in", where, True)
        s |= turn_fields(c.source, t, where, s["files"], s["gap_s"])
    elif kind == "pause":
        s["seconds"] = c.number(t, "seconds", where, pos=True)
    elif kind == "release":
        s["quiet_s"] = c.number(t, "quiet_s", where, local["drain_quiet_s"], pos=False)
        s["timeout_s"] = c.number(t, "timeout_s", where, 30.0, pos=True)
    elif kind == "inject":
        role = c.string(t, "role", where)
        if role not in INJECT_ROLES:
            raise c.fail(f"{where}.role", f"{role!r}: one of {', '.join(INJECT_ROLES)}")
        s["role"] = role
        s["file"] = _audio_path(c, base_dir, t.get("file"), f"{where}.file")
        if ("offset_s" in t) == ("after_s" in t):
            raise c.fail(
                where, "give exactly one of `offset_s` (from the reply onset) or `after_s`"
            )
        if "offset_s" in t:
            s["offset_s"] = c.number(t, "offset_s", where, pos=False)
            s["timeout_s"] = c.number(t, "timeout_s", where, 30.0, pos=True)
        else:
            if "timeout_s" in t:
                raise c.fail(f"{where}.timeout_s", "only with `offset_s`")
            s["after_s"] = c.number(t, "after_s", where, pos=False)
        s["label"] = c.string(t, "label", where, _stem(s["file"]))
        s["barge_in"] = c.boolean(t, "barge_in", where, role == "interruption")
    else:  # drain
        s["quiet_s"] = c.number(t, "quiet_s", where, local["drain_quiet_s"], pos=False)
        s["max_s"] = c.number(t, "max_s", where, local["drain_max_s"], pos=True)
        s["wait_first_s"] = c.number(
            t, "wait_first_s", where, local["drain_wait_first_s"], pos=False
        )
    return s


def _conditioned(kind: str) -> set[str]:
    return {"condition"} if kind in CONDITION_STEPS else set()


def _condition(
    c: _Check, t: dict[str, Any], where: str, base_dir: str
) -> tuple[Any, str, str] | None:
    """A `condition` table (rig.conditions.spec), with where it was set (for later errors)."""
    if "condition" not in t:
        return None
    field = f"{where}.condition"
    return parse_condition(t["condition"], field, c.fail, base_dir), c.source, field


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


# -- building (audio decoded) ----------------------------------------------------------------


def _load(c: _Check, path: str, rate: int, cache: dict[Any, Pcm16], where: str) -> Pcm16:
    if path not in cache:
        try:
            cache[path] = load_wav(path, rate).pcm
        except AudioInputError as exc:
            raise c.fail(where, exc.reason) from exc
    return cache[path]


def _history(c: _Check, t: dict[str, Any], where: str) -> list[dict[str, str]]:
    """`history` (a list of {role, text}) or its shorthand `history_text` (one user message)."""
    if "history" in t and "history_text" in t:
        raise c.fail(f"{where}.history_text", "give history or history_text, not both")
    raw = t.get("history", [])
    if "history_text" in t:
        raw = [{"role": "user", "text": c.string(t, "history_text", where)}]
    try:
        return check_history(raw, f"{where}.history")
    except ConfigError as exc:
        field, _, reason = str(exc).partition(": ")
        raise c.fail(field, reason) from exc


def _build(
    c: _Check, spec: dict[str, Any], rate: int, scenario: str, cache: dict[Any, Pcm16]
) -> ScenarioItem:
    steps: list[Step] = []
    sources: list[dict[str, Any]] = []
    plays: list[Any] = []  # per Play, in order: the step's condition (rig.conditions)
    where = f"items[{spec['id']}]"
    own = None
    if spec["prefill"]:
        play, own, info = prefill_play(c.source, spec, rate, f"{where}.prefill", cache)
        steps.append(play)
        sources.append(info)
        plays.append(None)
    for i, s in enumerate(spec["steps"]):
        w = f"{where}.steps[{i}]"
        if s["type"] == "turn":
            parts: list[Pcm16] = []
            gap = np.zeros(round(s["gap_s"] * rate), np.int16)
            for j, f in enumerate(s["files"]):
                if j:
                    parts.append(gap)
                parts.append(slice_pcm(c.source, f, rate, s["slice"], w, cache))
            pcm = np.concatenate(parts)
            if speech_bounds(pcm, rate) is None:
                raise c.fail(w, "turn audio has no sound above -40 dBFS")
            if s["pad_before_s"] > 0:
                steps.append(Pause(s["pad_before_s"]))
            marks = ref_marks(s["marks"], rate, len(pcm), i)
            steps.append(Play(pcm, s["label"], "turn", s["barge_in"], marks))
            plays.append(s["condition"])
            if s["pad_after_s"] > 0:
                steps.append(Pause(s["pad_after_s"]))
            src: dict[str, Any] = {"role": "turn", "paths": s["files"], "samples": len(pcm)}
            if s["slice"] is not None and (
                s["slice"]["start_s"] is not None
                or s["slice"]["end_s"] is not None
                or s["slice"]["channel"] != "mean"
            ):
                src |= {k: s["slice"][k] for k in ("start_s", "end_s", "channel")}
            sources.append(src)
        elif s["type"] == "pause":
            steps.append(Pause(s["seconds"]))
        elif s["type"] == "release":
            steps.append(WaitQuiet(s["quiet_s"], s["timeout_s"]))
        elif s["type"] == "inject":
            pcm = _load(c, s["file"], rate, cache, w)
            if "offset_s" in s:
                steps.append(WaitOnset(s["offset_s"], s["timeout_s"]))
            elif s["after_s"] > 0:
                steps.append(Pause(s["after_s"]))
            steps.append(Play(pcm, s["label"], s["role"], s["barge_in"]))
            plays.append(s["condition"])
            sources.append({"role": s["role"], "path": s["file"], "samples": len(pcm)})
        else:
            steps.append(Drain(s["quiet_s"], s["max_s"], s["wait_first_s"]))
    meta: dict[str, Any] = {
        "scenario": scenario,
        "item": spec["id"],
        "kind": spec["kind"],
        "rules": spec["rules"],
        "max_s": spec["max_s"],
    }
    if spec["description"]:
        meta["description"] = spec["description"]
    session: dict[str, Any] = {"max_s": spec["max_s"]}
    if spec["history"]:
        meta["history"] = spec["history"]
    if spec["echo"]:
        meta["echo"] = session["echo"] = spec["echo"]
    if spec["prefill"]:
        meta["prefill_speed"] = spec["prefill_speed"]
        session["prefill_speed"] = spec["prefill_speed"]
    if spec["tags"]:
        meta["tags"] = spec["tags"]
    if spec["reference"]:
        meta["reference"] = spec["reference"]
    if spec["options"]:
        meta["options"] = spec["options"]
    if spec["prefill_channels"]:
        meta["prefill_channels"] = spec["prefill_channels"]
    plan = UserPlan(np.zeros(0, np.int16), rate, [], sources, steps=steps)
    return ScenarioItem(
        spec["id"], plan, meta, session, own, condition=spec["condition"], play_conditions=plays
    )
