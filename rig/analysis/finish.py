"""The finish step: everything that runs after a rollout's stream, outside the audio loop.

`analyze_log(metrics, log)`: the clock fit and each response's latency split
(rig.analysis.latency) and, over WebRTC, the rig-local shares (rig.analysis.webrtc), from
the session log alone. `finish_rollout` adds the two-track timing analysis of the rollout's
files (`analyze_rollout`); the runner calls it in a separate process once the writer has
closed those files.

Timing: `analyze_rollout` reads `user.wav`, `system.wav` (playback placement),
`received.wav` with the `down` rows of `chunks.jsonl` (the system's own stream, for
yield: rig.analysis.yields) and `events.jsonl`, takes the user turn spans and injections
the session recorded (`turn.start`/`turn.end`/`inject`), and runs
`rig.analysis.timing.analyze` with the item's `kind` and `rules` (TimingParams overrides).
The result is the `timing` block of metrics.json. Plain arguments in, a JSON-able dict
out, so it pickles across processes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from rig.analysis.activity import ActivityParams
from rig.analysis.asr import write_words
from rig.analysis.endpoint import apply_endpointing
from rig.analysis.latency import apply_decomposition
from rig.analysis.rollout import read_jsonl, read_track
from rig.analysis.selfecho import analyze_self_echo, own_echo, signals_from_events
from rig.analysis.timing import TimingParams, analyze, structure_from_events
from rig.analysis.voice import measure_replies
from rig.analysis.webrtc import add_shares
from rig.analysis.words import refine_onsets, word_metrics
from rig.analysis.yields import acks_from_events, stream_of
from rig.core.log import SessionLog
from rig.errors import ConfigError


def timing_params(rules: dict[str, Any] | None) -> TimingParams:
    """TimingParams from a scenario's `rules` (an `activity` table sets ActivityParams)."""
    rules = dict(rules or {})
    act = rules.pop("activity", None)
    known = {f.name for f in dataclasses.fields(TimingParams)}
    unknown = sorted(set(rules) - known)
    if unknown:
        raise ConfigError(f"unknown timing rule(s): {', '.join(unknown)}")
    if act is not None:
        rules["activity"] = ActivityParams(**act)
    return TimingParams(**rules)


def analyze_rollout(
    rollout_dir: str,
    *,
    kind: str | None = None,
    rules: dict[str, Any] | None = None,
    t0_ns: int | None = None,
) -> dict[str, Any]:
    """Timing metrics of a rollout (kind `free` or None: metrics without a pass rule)."""
    root = Path(rollout_dir)
    events = read_jsonl(root / "events.jsonl")
    if t0_ns is None:
        start = next((e for e in events if e.get("kind") == "session.start"), None)
        t0_ns = start.get("t0_ns") if start else None
    if not isinstance(t0_ns, int):
        raise ConfigError(f"{root}: no session.start event (the session never started)")
    # the user's speech is timed on the track before conditions changed it (noise, echo)
    clean = root / "user_clean.wav"
    user, rate = read_track(clean if clean.exists() else root / "user.wav")
    system = np.zeros(0, np.float32)
    if (root / "system.wav").exists():
        system, sys_rate = read_track(root / "system.wav")
        if sys_rate != rate and system.size:
            system = soxr.resample(system, sys_rate, rate).astype(np.float32)
    echo = own_echo(root, user.size)  # the echo condition's part of user.wav, or None
    if echo is not None:  # the user's side is what the user said (rig.analysis.selfecho)
        user = user - echo
    # both tracks on one timeline: pad the shorter with silence
    n = max(user.size, system.size)
    user = np.pad(user, (0, n - user.size))
    system = np.pad(system, (0, n - system.size))
    turns, injections = structure_from_events(events, t0_ns)
    params = timing_params(rules)
    stream, stream_rate = None, None
    if (root / "received.wav").exists():
        received, stream_rate = read_track(root / "received.wav")
        downs = [c for c in read_jsonl(root / "chunks.jsonl") if c.get("dir") == "down"]
        stream = stream_of(received, stream_rate, downs, t0_ns, params.activity)
    out = analyze(
        user,
        system,
        rate,
        kind=None if kind in (None, "free") else kind,
        turns=turns,
        injections=injections,
        params=params,
        t0_ns=t0_ns,
        placement="playback",
        stream=stream,
        stream_rate=stream_rate,
        acks_s=acks_from_events(events, t0_ns),
    )
    out.update(_words_block(root, out, params, {"user": (user, rate), "system": (system, rate)}))
    out["voice"] = measure_replies(
        system,
        rate,
        out,
        whisper_hnr_max_db=params.whisper_hnr_max_db,
        whisper_voiced_max=params.whisper_voiced_max,
        words=read_jsonl(root / "words.jsonl") if (root / "words.jsonl").exists() else (),
    )
    if echo is not None:
        system_segs = [(float(s), float(e)) for s, e in out["activity"]["system"]]
        out["self_echo"] = analyze_self_echo(
            user[: echo.size] + echo,
            echo,
            rate,
            system_segs,
            signals_from_events(events, t0_ns),
            activity=params.activity,
        )
        summary = next((e for e in events if e.get("kind") == "echo.summary"), None)
        out["self_echo"]["condition"] = summary  # the echo path's own account (rig.echo.path)
    truncations = [e for e in events if e.get("kind") == "playback.truncate"]
    # a truncated playback track stops at the barge-in by construction (docs/metrics.md)
    out["playback_truncated"] = len(truncations)
    return out


def _words_block(
    root: Path, timing: dict[str, Any], p: TimingParams, tracks: dict[str, Any]
) -> dict[str, Any]:
    """`asr: on` and the word metrics when the rollout has words.jsonl, else `asr: off`."""
    if not (root / "words.jsonl").exists():
        return {"asr": "off"}
    rows = read_jsonl(root / "words.jsonl")
    words: list[dict[str, Any]] = []
    for track, (x, rate) in tracks.items():
        mine = [w for w in rows if w.get("track") == track and _is_word(w)]
        words += refine_onsets(mine, x, rate, p.activity.energy_dbfs)
    system = [(float(s), float(e)) for s, e in timing["activity"]["system"]]
    block = word_metrics(
        system,
        timing["responses"],
        words,
        backchannel_max_words=p.backchannel_max_words,
        backchannel_max_s=p.backchannel_max_s,
        early_onset_s=p.early_onset_s,
        response_window_s=p.response_window_s,
    )
    return {"asr": "on", "words": block}


def _is_word(w: dict[str, Any]) -> bool:
    return all(isinstance(w.get(k), int | float) for k in ("start", "end")) and "word" in w


def analyze_log(metrics: dict[str, Any], log: SessionLog | None) -> dict[str, Any]:
    """metrics.json with what the session log says about each response: the WebRTC shares,
    the clock fit, the latency split and endpointing vs generation (pure, picklable in; no
    log: unchanged)."""
    if log is None:
        return metrics
    metrics = {**metrics, "responses": add_shares(list(metrics.get("responses", [])), log)}
    return apply_endpointing(apply_decomposition(metrics, log), log)


def finish_rollout(
    rollout_dir: str,
    metrics: dict[str, Any],
    log: SessionLog | None,
    *,
    kind: str | None = None,
    rules: dict[str, Any] | None = None,
    analyze: bool = True,
    asr_model: str | None = None,
) -> dict[str, Any]:
    """Everything that runs after a rollout's stream, in the runner's worker process:
    the clock fit and latency split, ASR words (with `asr_model`), then the two-track
    timing analysis."""
    metrics = analyze_log(metrics, log)
    asr_error = None
    if analyze and asr_model and isinstance(metrics.get("t0_ns"), int):
        try:
            write_words(rollout_dir, asr_model)
        except Exception as exc:  # noqa: BLE001 - ASR failing must not lose the timing
            asr_error = f"{type(exc).__name__}: {exc}"
    if analyze and isinstance(metrics.get("t0_ns"), int):
        try:
            timing = analyze_rollout(rollout_dir, kind=kind, rules=rules, t0_ns=metrics["t0_ns"])
            if asr_error is not None:
                timing = {**timing, "asr": "error", "asr_error": asr_error}
            metrics = {**metrics, "timing": timing, "pass": timing.get("pass")}
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            metrics = {**metrics, "timing": {"error": f"{type(exc).__name__}: {exc}"}, "pass": None}
    return metrics
