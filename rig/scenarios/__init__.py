"""Scenarios: what to play, as user plans. `resolve()` accepts a WAV file (one user turn with
silence padding), a list of WAV files, or `builtin:NAME`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from rig.errors import ScenarioError
from rig.plan import PlanBuilder, UserPlan


@dataclass
class ScenarioItem:
    item_id: str
    plan: UserPlan
    meta: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)


def data_path(name: str) -> str:
    return str(resources.files("rig").joinpath("data", name))


DEMO_TURNS = ("turn_what.wav", "turn_weather.wav", "turn_recipe.wav")


def builtin_demo(sample_rate: int) -> list[ScenarioItem]:
    items = []
    for name in DEMO_TURNS:
        stem = name.removeprefix("turn_").removesuffix(".wav")
        plan = (
            PlanBuilder(sample_rate)
            .add_silence(0.5)
            .add_wav(data_path(name), stem)
            .add_silence(1.0)
            .build()
        )
        items.append(ScenarioItem(stem, plan, {"scenario": "demo", "item": stem}))
    return items


BUILTINS = {"demo": builtin_demo}


def resolve(
    spec: str, sample_rate: int, *, lead_s: float = 0.5, pad_s: float = 1.0
) -> list[ScenarioItem]:
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in BUILTINS:
            raise ScenarioError(
                spec, f"no built-in suite {name!r}; known: {', '.join(sorted(BUILTINS))}"
            )
        return BUILTINS[name](sample_rate)
    if spec.lower().endswith((".wav", ".flac", ".ogg")):
        stem = os.path.splitext(os.path.basename(spec))[0]
        plan = (
            PlanBuilder(sample_rate)
            .add_silence(lead_s)
            .add_wav(spec, stem)
            .add_silence(pad_s)
            .build()
        )
        return [ScenarioItem(stem, plan, {"scenario": "file", "item": stem})]
    if spec.lower().endswith((".toml", ".json")):
        from rig.scenarios.fileformat import load_scenario_file  # the scenario format

        items: list[ScenarioItem] = load_scenario_file(spec, sample_rate)
        return items
    raise ScenarioError(spec, "not a WAV file, scenario file (.toml/.json) or builtin:NAME")
