"""The benchmark fields of a scenario item and its turn steps, checked and then built.

rig.scenarios.fileformat calls these: `item_fields` and `turn_fields` while it validates (no
audio decoded), `prefill_play` and `turn_audio` while it builds. The fields themselves are
described in rig.scenarios.marks (marks), rig.scenarios.slices (start_s / end_s / channel,
two-channel prefill) and rig.scenarios.itemfields (tags, options, reference).
"""

from __future__ import annotations

from typing import Any

from rig.audio.pcm import Pcm16
from rig.audio.source import load_channels
from rig.core.director import Play
from rig.errors import AudioInputError, ScenarioError
from rig.scenarios.itemfields import check_options, check_reference, check_tags
from rig.scenarios.marks import check_marks, ref_marks
from rig.scenarios.slices import check_prefill_channels, check_slice, file_duration_s

PREFILL_SLICE_KEYS = ("prefill_start_s", "prefill_end_s", "prefill_channel")
ITEM_FIELDS = {
    "tags",
    "options",
    "reference",
    "prefill_channels",
    "prefill_marks",
    *PREFILL_SLICE_KEYS,
}
TURN_FIELDS = {"start_s", "end_s", "channel", "marks"}


def item_fields(
    source: str, t: dict[str, Any], where: str, base_dir: str, prefill: str | None
) -> dict[str, Any]:
    """tags, options, reference and the prefill's slice, channels and marks."""
    out: dict[str, Any] = {
        "tags": check_tags(source, t.get("tags"), where),
        "options": check_options(source, t.get("options"), where),
        "reference": check_reference(source, t.get("reference"), where, base_dir),
        "prefill_slice": None,
        "prefill_channels": None,
        "prefill_marks": [],
    }
    used = sorted(k for k in (*PREFILL_SLICE_KEYS, "prefill_channels", "prefill_marks") if k in t)
    if prefill is None:
        if used:
            raise ScenarioError(source, "only with `prefill`", f"{where}.{used[0]}")
        return out
    span = check_slice(source, t, where, prefill, PREFILL_SLICE_KEYS)
    if "prefill_channels" in t:
        if "prefill_channel" in t:
            raise ScenarioError(
                source,
                "give prefill_channel (one) or prefill_channels (user + own), not both",
                f"{where}.prefill_channels",
            )
        out["prefill_channels"] = check_prefill_channels(
            source, t["prefill_channels"], where, span["channels"]
        )
    out["prefill_slice"] = span
    out["prefill_marks"] = check_marks(
        source, t.get("prefill_marks"), f"{where}.prefill_marks", span["duration_s"]
    )
    return out


def turn_fields(
    source: str, t: dict[str, Any], where: str, files: list[str], gap_s: float
) -> dict[str, Any]:
    """A turn step's slice (only with `file`) and marks, checked against its duration."""
    if len(files) > 1 or "files" in t:
        for key in ("start_s", "end_s", "channel"):
            if key in t:
                raise ScenarioError(source, "only with `file` (one file, sliced)", f"{where}.{key}")
        duration = sum(file_duration_s(source, f, where)[0] for f in files)
        duration += gap_s * (len(files) - 1)
        span = None
    else:
        span = check_slice(source, t, where, files[0])
        duration = span["duration_s"]
    marks = check_marks(source, t.get("marks"), f"{where}.marks", duration)
    return {"slice": span, "marks": marks}


def _decode(
    source: str,
    path: str,
    rate: int,
    span: dict[str, Any] | None,
    channels: list[Any],
    where: str,
) -> list[Pcm16]:
    try:
        got = load_channels(
            path,
            rate,
            channels,
            start_s=None if span is None else span["start_s"],
            end_s=None if span is None else span["end_s"],
        )
    except AudioInputError as exc:
        raise ScenarioError(source, exc.reason, where) from exc
    return [a.pcm for a in got]


def slice_pcm(
    source: str,
    path: str,
    rate: int,
    span: dict[str, Any] | None,
    where: str,
    cache: dict[Any, Pcm16],
) -> Pcm16:
    """One file's slice and channel at `rate` (cached per file, slice and channel)."""
    key = (path,) if span is None else (path, span["start_s"], span["end_s"], span["channel"])
    if key not in cache:
        channel = None if span is None or span["channel"] == "mean" else span["channel"]
        cache[key] = _decode(source, path, rate, span, [channel], where)[0]
    return cache[key]


def prefill_play(
    source: str, spec: dict[str, Any], rate: int, where: str, cache: dict[Any, Pcm16]
) -> tuple[Play, Pcm16 | None, dict[str, Any]]:
    """The prefill step (with its marks), the system's own past track for a two-channel
    prefill (None otherwise) and its `sources` entry."""
    path, span, roles = spec["prefill"], spec["prefill_slice"], spec["prefill_channels"]
    own = None
    if roles:
        user_pcm, own = _decode(
            source, path, rate, span, [roles.index("user"), roles.index("own")], where
        )
    else:
        user_pcm = slice_pcm(source, path, rate, span, where, cache)
    marks = ref_marks(spec["prefill_marks"], rate, len(user_pcm), -1)
    info: dict[str, Any] = {"role": "prefill", "path": path, "samples": len(user_pcm)}
    if span is not None:
        info |= {k: span[k] for k in ("start_s", "end_s", "channel")}
    if roles:
        info["channels"] = roles
    return Play(user_pcm, "prefill", "prefill", barge_in=False, marks=marks), own, info
