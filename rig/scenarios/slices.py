"""Corpus slices in a scenario file: `start_s` / `end_s` / `channel` on a turn or prefill.

How this works: a long conversation file stays one file; a turn (or the prefill) names the
part it plays, `start_s`..`end_s` seconds into the file, and the channel it takes: an index
(0 = the first) or `"mean"` (the downmix, what a file without `channel` gets). A two-channel
prefill names what each channel of the file is (`prefill_channels = ["user", "own"]`: the
user's side goes out as the uplink, the system's own past track to a dialect that takes
it). Checked from the file's header alone (rig.audio.source.probe_wav: rate, channels,
frames), before any audio is decoded; decoded later with one seek and a read of the slice.
Every problem is one ScenarioError naming the field.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.audio.source import probe_wav
from rig.errors import AudioInputError, ScenarioError

SLICE_KEYS = ("start_s", "end_s", "channel")
PREFILL_ROLES = ("user", "own", "none")


def _seconds(source: str, v: Any, w: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
        name = "a boolean" if isinstance(v, bool) else type(v).__name__
        raise ScenarioError(source, f"must be a number of seconds, got {name}", w)
    if v < 0:
        raise ScenarioError(source, f"must be >= 0, got {v}", w)
    return float(v)


def file_duration_s(source: str, path: str, where: str) -> tuple[float, int]:
    """(duration in seconds, channels) of an audio file, from its header."""
    try:
        info = probe_wav(path)
    except AudioInputError as exc:
        raise ScenarioError(source, exc.reason, where) from exc
    return info.frames / info.sample_rate, info.channels


def check_slice(
    source: str,
    t: dict[str, Any],
    where: str,
    path: str,
    keys: tuple[str, str, str] = SLICE_KEYS,
) -> dict[str, Any]:
    """{start_s, end_s, channel, duration_s} of the part of `path` a step plays; `keys` are
    the names of the three fields in `t` (prefill_start_s, ... for the prefill)."""
    k_start, k_end, k_chan = keys
    total_s, n_channels = file_duration_s(source, path, where)
    start = _seconds(source, t[k_start], f"{where}.{k_start}") if k_start in t else 0.0
    end = _seconds(source, t[k_end], f"{where}.{k_end}") if k_end in t else total_s
    if start >= total_s:
        raise ScenarioError(
            source,
            f"{start:g} s is past the end of the file ({total_s:g} s)",
            f"{where}.{k_start}",
        )
    if k_end in t and end > total_s + 1e-6:
        raise ScenarioError(
            source, f"{end:g} s is past the end of the file ({total_s:g} s)", f"{where}.{k_end}"
        )
    if end <= start:
        raise ScenarioError(
            source, f"must be after {k_start} ({start:g} s), got {end:g}", f"{where}.{k_end}"
        )
    channel: int | str = "mean"
    if k_chan in t:
        v = t[k_chan]
        if v == "mean":
            channel = "mean"
        elif isinstance(v, bool) or not isinstance(v, int):
            raise ScenarioError(
                source, f'must be a channel index or "mean", got {v!r}', f"{where}.{k_chan}"
            )
        elif not 0 <= v < n_channels:
            raise ScenarioError(
                source,
                f"no channel {v}: the file has {n_channels} (0-{n_channels - 1})",
                f"{where}.{k_chan}",
            )
        else:
            channel = v
    return {
        "start_s": start if k_start in t else None,
        "end_s": min(end, total_s) if k_end in t else None,
        "channel": channel,
        "duration_s": min(end, total_s) - start,
        "channels": n_channels,
    }


def check_prefill_channels(source: str, raw: Any, where: str, n_channels: int) -> list[str]:
    """`prefill_channels`: the role of each of the file's channels, one `user` and one
    `own` (the system's own past track); `none` skips a channel."""
    w = f"{where}.prefill_channels"
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise ScenarioError(source, 'must be a list such as ["user", "own"]', w)
    bad = [x for x in raw if x not in PREFILL_ROLES]
    if bad:
        raise ScenarioError(source, f"{bad[0]!r}: each one of {', '.join(PREFILL_ROLES)}", w)
    if raw.count("user") != 1 or raw.count("own") != 1:
        raise ScenarioError(source, 'name exactly one "user" and one "own" channel', w)
    if len(raw) > n_channels:
        raise ScenarioError(
            source, f"names {len(raw)} channels; the prefill file has {n_channels}", w
        )
    return list(raw)
