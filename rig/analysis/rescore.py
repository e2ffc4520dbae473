"""Re-scoring a finished run with other timing rules, without re-running a conversation.

Why: rules (the yield window, the backchannel length, the VAD) are fixed in the scenario
before a run; changing one afterwards must not mean talking to the system again. Every
input of the timing analysis is in the run directory (user.wav, system.wav, received.wav,
chunks.jsonl, events.jsonl, and `kind`, `rules`, `t0_ns` in metrics.json), so
`rescore` runs `analyze_rollout` again per rollout with the stored rules updated by the
overrides. With no overrides it reproduces the stored `timing` exactly (the analysis is a
pure function of those files; tests/analysis/test_rescore.py checks it on a real run).

Nothing is written: the re-scored metrics live in the returned RunData (the report's).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from rig.analysis.aggregate import RolloutMetrics, RunData
from rig.analysis.finish import analyze_rollout, timing_params
from rig.errors import ConfigError


def parse_rule_args(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` strings -> rules. Values are JSON when they parse (numbers, true/false,
    quoted strings), else plain strings; `activity.KEY=value` sets an ActivityParams field."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--rules wants KEY=VALUE, got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw.strip()
        if key.startswith("activity."):
            out.setdefault("activity", {})[key.removeprefix("activity.")] = value
        else:
            out[key] = value
    timing_params(out)  # unknown keys and bad values fail here, before any rollout is read
    return out


def merge_rules(stored: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """The rules a rollout ran with, updated by `overrides` (the activity table key by key)."""
    base = dict(stored) if isinstance(stored, dict) else {}
    out = {**base, **{k: v for k, v in overrides.items() if k != "activity"}}
    if "activity" in overrides:
        act = base.get("activity")
        out["activity"] = {**(act if isinstance(act, dict) else {}), **overrides["activity"]}
    return out


def rescore(data: RunData, overrides: dict[str, Any]) -> RunData:
    """Every analysed rollout of `data` analysed again with its rules + `overrides`."""
    rollouts = [_rescore_one(data, r, overrides) for r in data.rollouts]
    return dataclasses.replace(data, rollouts=rollouts)


def _rescore_one(data: RunData, r: RolloutMetrics, overrides: dict[str, Any]) -> RolloutMetrics:
    m = r.metrics
    t0 = m.get("t0_ns")
    if not isinstance(m.get("timing"), dict) or not isinstance(t0, int) or isinstance(t0, bool):
        return r  # never analysed (no stream, incomplete files): nothing to re-score
    if "not analysed" in str(m["timing"].get("error", "")):
        return r
    rules = merge_rules(m.get("rules"), overrides)
    kind = m.get("kind")
    try:
        timing = analyze_rollout(
            str(data.run_dir / "rollouts" / r.rollout_id),
            kind=kind if isinstance(kind, str) else None,
            rules=rules,
            t0_ns=t0,
        )
    except Exception as exc:  # noqa: BLE001 - one rollout failing must not lose the report
        timing = {"error": f"{type(exc).__name__}: {exc}"}
    # through JSON, as metrics.json holds it (tuples become lists)
    timing = json.loads(json.dumps(timing, allow_nan=False))
    metrics = {**m, "timing": timing, "pass": timing.get("pass")}
    if overrides:
        metrics["rules"] = rules
    return dataclasses.replace(r, metrics=metrics)


def describe(overrides: dict[str, Any]) -> str:
    """`key=value, ...` of the overrides, for the report header."""
    flat = {k: v for k, v in overrides.items() if k != "activity"}
    flat |= {f"activity.{k}": v for k, v in (overrides.get("activity") or {}).items()}
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(flat.items()))


def verdict_changes(before: RunData, after: RunData) -> list[str]:
    """`rollout: pass True -> False` for every verdict the new rules changed."""
    old = {r.rollout_id: r.metrics.get("pass") for r in before.rollouts}
    return [
        f"{r.rollout_id}: pass {old.get(r.rollout_id)} -> {r.metrics.get('pass')}"
        for r in after.rollouts
        if old.get(r.rollout_id) != r.metrics.get("pass")
    ]
