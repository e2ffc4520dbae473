"""Scenarios: what to play, as user plans. `resolve()` accepts a WAV file (one user turn with
silence padding), a scenario file (.toml/.json, rig.scenarios.fileformat) or `builtin:NAME`
(rig.scenarios.builtin)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rig.errors import ScenarioError
from rig.plan import PlanBuilder, UserPlan


@dataclass
class ScenarioItem:
    item_id: str
    plan: UserPlan
    meta: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)


def data_path(*parts: str) -> str:
    from rig.scenarios.builtin import data_path as _data_path

    return _data_path(*parts)


def resolve(
    spec: str, sample_rate: int, *, lead_s: float = 0.5, pad_s: float = 1.0
) -> list[ScenarioItem]:
    if spec.startswith("builtin:"):
        from rig.scenarios.builtin import BUILTINS

        name = spec.split(":", 1)[1]
        if name not in BUILTINS:
            raise ScenarioError(
                spec, f"no built-in suite {name!r}; known: {', '.join(sorted(BUILTINS))}"
            )
        return BUILTINS[name](sample_rate)
    if spec.lower().endswith((".wav", ".flac", ".ogg")):
        from rig.ids import safe_id

        stem = safe_id(os.path.splitext(os.path.basename(spec))[0])  # the rollout's dir name
        plan = (
            PlanBuilder(sample_rate)
            .add_silence(lead_s)
            .add_wav(spec, stem)
            .add_silence(pad_s)
            .build()
        )
        return [ScenarioItem(stem, plan, {"scenario": "file", "item": stem})]
    if spec.lower().endswith((".toml", ".json")):
        from rig.scenarios.fileformat import load_scenario_file

        return load_scenario_file(spec, sample_rate)
    raise ScenarioError(spec, "not a WAV file, scenario file (.toml/.json) or builtin:NAME")
