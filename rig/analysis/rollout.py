"""Read one rollout directory for pictures and labels, tolerating a crashed one.

A rollout that was killed mid-stream may have a stale WAV header, a half-written last JSONL
line, or no metrics.json at all: everything readable is returned, the rest is left empty.
Times are seconds on the session timeline (sample `s` is `s / sample_rate` s after `t0_ns`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile as sf

from rig import safejson
from rig.core.units import NS_PER_S
from rig.errors import AudioInputError
from rig.limits import MAX_CHANNELS

MARK_KINDS = ("turn.start", "turn.end", "inject", "mark")


@dataclass(frozen=True, slots=True)
class Mark:
    """A point in time (`end_s` None) or a span on the session timeline, with a label."""

    kind: str
    t_s: float
    label: str
    end_s: float | None = None


@dataclass(frozen=True, slots=True)
class Response:
    user_end_s: float
    onset_s: float
    latency_ms: float
    #: uplink, model, downlink, queue (ms; empty when the response was not split)
    parts_ms: tuple[float, ...] = ()
    method: str | None = None  # clock_method of the split
    #: endpointing vs generation (rig.analysis.endpoint) and where the decision falls on the
    #: session timeline: the user's end + uplink (else half the round trip, else 0) + detect
    detect_ms: float | None = None
    generation_ms: float | None = None
    decision_s: float | None = None


@dataclass(frozen=True, slots=True)
class RolloutView:
    """Everything the plot and the label export need from one rollout."""

    path: Path
    sample_rate: int
    t0_ns: int | None
    user: npt.NDArray[np.float32]
    system: npt.NDArray[np.float32]
    marks: list[Mark] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object, or None when the file is missing, unreadable, not JSON (deep nesting,
    NaN and huge numbers included: rig.safejson) or not an object."""
    try:
        data = safejson.parse(path.read_bytes(), max_bytes=256 << 20)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every parseable object line; a torn last line (crash) or junk line is skipped."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            obj = safejson.parse(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def read_track(path: Path) -> tuple[npt.NDArray[np.float32], int]:
    """Mono float32 samples and rate. PCM16 data runs to the end of the file, so a header
    left stale by a crash loses nothing; other formats go through soundfile."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AudioInputError(str(path), f"cannot read: {exc.strerror}") from exc
    if len(raw) < 12 or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise AudioInputError(str(path), "not a RIFF/WAVE file")
    pos, fmt = 12, None
    while pos + 8 <= len(raw):
        cid, size = raw[pos : pos + 4], struct.unpack("<I", raw[pos + 4 : pos + 8])[0]
        body = pos + 8
        if cid == b"fmt ":
            if size < 16 or body + 16 > len(raw):
                raise AudioInputError(str(path), f"fmt chunk of {size} bytes (16 needed)")
            fmt = struct.unpack("<HHIIHH", raw[body : body + 16])
        elif cid == b"data":
            if fmt is None:
                break
            tag, channels, rate, _, _, bits = fmt
            if not 1 <= channels <= MAX_CHANNELS or rate <= 0:
                raise AudioInputError(
                    str(path), f"header says {channels} channels at {rate} Hz: not a usable WAV"
                )
            if tag == 1 and bits == 16:
                data = raw[body:]
                data = data[: len(data) - len(data) % (2 * channels)]
                pcm = np.frombuffer(data, dtype="<i2").reshape(-1, channels)
                return (pcm.mean(axis=1) / 32768.0).astype(np.float32), int(rate)
            break
        pos = body + size + (size & 1)
    try:
        x, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises its own error types
        raise AudioInputError(str(path), f"unsupported or broken WAV: {exc}") from exc
    return x.mean(axis=1).astype(np.float32), int(rate)


def load_rollout(path: str | Path) -> RolloutView:
    """Tracks, events, marks and responses of one rollout directory."""
    root = Path(path)
    if not root.is_dir():
        raise AudioInputError(str(root), "not a rollout directory")
    metrics = read_json(root / "metrics.json") or {}
    events = read_jsonl(root / "events.jsonl")
    tracks: dict[str, npt.NDArray[np.float32]] = {}
    m_rate = metrics.get("sample_rate")
    rate = m_rate if isinstance(m_rate, int) and not isinstance(m_rate, bool) else 0
    for name in ("user", "system"):
        wav = root / f"{name}.wav"
        if wav.exists():
            tracks[name], rate = read_track(wav)
        else:
            tracks[name] = np.zeros(0, dtype=np.float32)
    if not tracks["user"].size and not tracks["system"].size:
        raise AudioInputError(str(root), "no user.wav or system.wav")
    t0_ns = metrics.get("t0_ns")
    if not isinstance(t0_ns, int):
        start = next((e for e in events if e.get("kind") == "session.start"), None)
        t0_ns = start.get("t0_ns", start.get("t_ns")) if start else None
    t0 = t0_ns if isinstance(t0_ns, int) else None
    return RolloutView(
        path=root,
        sample_rate=rate,
        t0_ns=t0,
        user=tracks["user"],
        system=tracks["system"],
        marks=marks_from_events(events, t0) if t0 is not None else [],
        responses=responses_from_metrics(metrics, t0) if t0 is not None else [],
        metrics=metrics,
        events=events,
    )


def marks_from_events(events: list[dict[str, Any]], t0_ns: int) -> list[Mark]:
    """`turn.start`, `turn.end`, `inject` and reference `mark` events as labelled marks (a
    reference mark's kind is `ref.<mark>`: ref.eot, ref.pause, ...)."""
    marks: list[Mark] = []
    n_turn = 0
    for ev in events:
        kind, t_ns = ev.get("kind"), ev.get("t_ns")
        if kind not in MARK_KINDS or not isinstance(t_ns, int):
            continue
        t_s = (t_ns - t0_ns) / NS_PER_S
        if kind == "mark":
            end_ns = ev.get("end_ns")
            end_s = (end_ns - t0_ns) / NS_PER_S if isinstance(end_ns, int) else None
            name = str(ev.get("mark"))
            label = f"{name}: {ev['label']}" if ev.get("label") else name
            marks.append(Mark(f"ref.{name}", t_s, label, end_s))
        # user turns numbered as the timing analysis and the report number them (0, 1, ...),
        # not by the session log's index, which counts injections too
        elif kind == "turn.start":
            marks.append(Mark(kind, t_s, f"turn {n_turn} start"))
        elif kind == "turn.end":
            marks.append(Mark(kind, t_s, f"turn {n_turn} end"))
            n_turn += 1
        else:
            what = ev.get("injection", ev.get("type", "inject"))
            end_ns = ev.get("end_ns")
            end_s = (end_ns - t0_ns) / NS_PER_S if isinstance(end_ns, int) else None
            marks.append(Mark(kind, t_s, f"inject {what}", end_s))
    return marks


def responses_from_metrics(metrics: dict[str, Any], t0_ns: int) -> list[Response]:
    out: list[Response] = []
    for r in metrics.get("responses") or []:
        if not isinstance(r, dict):
            continue
        end_ns, onset_ns = r.get("user_end_ns"), r.get("onset_ns")
        if not isinstance(end_ns, int) or not isinstance(onset_ns, int):
            continue
        lat = r.get("latency_ms")
        lat_ms = float(lat) if isinstance(lat, int | float) else (onset_ns - end_ns) / 1e6
        end_s = (end_ns - t0_ns) / NS_PER_S
        raw = [r.get(k) for k in ("uplink_ms", "model_ms", "downlink_ms", "queue_ms")]
        parts = tuple(float(x) for x in raw if isinstance(x, int | float))
        method = r.get("clock_method")
        detect, gen = _num(r.get("detect_ms")), _num(r.get("generation_ms"))
        decision_s = None
        if detect is not None:
            up, rtt = _num(r.get("uplink_ms")), _num(r.get("detect_rtt_ms"))
            up_ms = up if up is not None else (rtt / 2 if rtt is not None else 0.0)
            decision_s = end_s + (up_ms + detect) / 1000
        out.append(
            Response(
                end_s,
                (onset_ns - t0_ns) / NS_PER_S,
                lat_ms,
                parts if len(parts) == 4 else (),
                str(method) if method else None,
                detect,
                gen,
                decision_s,
            )
        )
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None
