"""Run directories built by hand for scorer tests: what `rig run` leaves, per the marks
contract (docs/benchmarks.md): metrics.json with `marks`, `tags`, `reference`, `censored`
and `timing.activity` (speech segments given, so no VAD runs), events.jsonl, tiny WAVs and,
when words are given, words.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

T0_NS = 1_000_000_000_000
RATE = 16_000


def mark(kind: str, t_s: float, end_s: float | None = None, label: str | None = None) -> Any:
    return {"mark": kind, "t_s": t_s, "end_s": end_s, "label": label}


def rollout(
    run: Path,
    rid: str,
    *,
    system: list[tuple[float, float]] = (),  # type: ignore[assignment]
    marks: list[dict[str, Any]] = (),  # type: ignore[assignment]
    tags: dict[str, str] | None = None,
    words: list[tuple[str, float, float]] | None = None,
    reference: dict[str, Any] | None = None,
    censored: bool = False,
    timing_valid: bool = True,
    status: str = "ok",
    kind: str | None = None,
    item: str | None = None,
    timing: dict[str, Any] | None = None,
    events: list[dict[str, Any]] = (),  # type: ignore[assignment]
    extra: dict[str, Any] | None = None,
) -> Path:
    """One rollout directory under `run/rollouts/` (the run's manifest made on first use)."""
    (run / "rollouts").mkdir(parents=True, exist_ok=True)
    if not (run / "manifest.json").exists():
        (run / "manifest.json").write_text(json.dumps({"run_id": run.name, "seed": 0}))
    root = run / "rollouts" / rid
    root.mkdir()
    silence = np.zeros(RATE // 10, np.int16)  # 0.1 s: the scorers read segments, not audio
    sf.write(root / "user.wav", silence, RATE, subtype="PCM_16")
    sf.write(root / "system.wav", silence, RATE, subtype="PCM_16")
    tm: dict[str, Any] = {"activity": {"system": [list(s) for s in system], "user": []}}
    tm.update(timing or {})
    metrics: dict[str, Any] = {
        "status": status,
        "rollout_id": rid,
        "scenario": "hand",
        "item": item or rid,
        "kind": kind,
        "t0_ns": T0_NS,
        "timing_valid": timing_valid,
        "timing": tm,
        "marks": list(marks),
        "tags": tags or {},
        "reference": reference,
        "censored": censored,
        **(extra or {}),
    }
    (root / "metrics.json").write_text(json.dumps(metrics))
    lines = [{"kind": "session.start", "t_ns": T0_NS, "source": "rig", "t0_ns": T0_NS}]
    lines += list(events)
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    if words is not None:
        rows = [
            {"word": w, "start": s, "end": e, "probability": 0.9, "track": "system",
             "placement": "playback"}
            for w, s, e in words
        ]  # fmt: skip
        (root / "words.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root
