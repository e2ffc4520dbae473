"""Built-in suites, shipped with their audio in `rig/data/`.

`demo`: three questions, one per rollout (what `rig demo` plays).
`timing`: the turn-taking timing suite (pause, turn_taking, backchannel, interruption,
user_backchannel, and the question whispered and in babble: input conditions), written in
the scenario file format: `rig/data/timing/timing.toml`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from rig.core.plan import PlanBuilder
from rig.scenarios.fileformat import load_scenario_file
from rig.scenarios.item import ScenarioItem


def data_path(*parts: str) -> str:
    return str(resources.files("rig").joinpath("data", *parts))


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
        meta = {"scenario": "demo", "item": stem, "kind": "turn_taking"}
        items.append(ScenarioItem(stem, plan, meta))
    return items


def builtin_timing(sample_rate: int) -> list[ScenarioItem]:
    return load_scenario_file(data_path("timing", "timing.toml"), sample_rate)


BUILTINS: dict[str, Callable[[int], list[ScenarioItem]]] = {
    "demo": builtin_demo,
    "timing": builtin_timing,
}

DESCRIPTIONS: dict[str, str] = {
    "demo": "three spoken questions, one rollout each (rig demo)",
    "timing": "turn-taking timing: pause, turn_taking, backchannel, interruption, "
    "user_backchannel, whisper, noisy",
}
