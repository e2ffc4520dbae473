"""Scenarios: what to play, as user plans. `resolve()` accepts a WAV file (one user turn with
silence padding), a scenario file (.toml/.json, rig.scenarios.fileformat) or `builtin:NAME`
(rig.scenarios.builtin)."""

from __future__ import annotations

import os

from rig.core.plan import PlanBuilder, speech_bounds
from rig.errors import AudioInputError, ScenarioError
from rig.ids import safe_id
from rig.scenarios.builtin import BUILTINS, data_path
from rig.scenarios.fileformat import load_scenario_file
from rig.scenarios.item import ScenarioItem

__all__ = ["AUDIO_SUFFIXES", "ScenarioItem", "data_path", "resolve"]

#: audio files `rig run FILE` plays as one turn (libsndfile decodes each of them)
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")


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
    if spec.lower().endswith(AUDIO_SUFFIXES):
        stem = safe_id(os.path.splitext(os.path.basename(spec))[0])  # the rollout's dir name
        plan = (
            PlanBuilder(sample_rate)
            .add_silence(lead_s)
            .add_wav(spec, stem)
            .add_silence(pad_s)
            .build()
        )
        if speech_bounds(plan.pcm, sample_rate) is None:  # as a scenario file's turn is
            raise AudioInputError(spec, "no sound above -40 dBFS: a silent file, nothing to answer")
        return [ScenarioItem(stem, plan, {"scenario": "file", "item": stem})]
    if spec.lower().endswith((".toml", ".json")):
        return load_scenario_file(spec, sample_rate)
    raise ScenarioError(
        spec,
        f"not an audio file ({', '.join(AUDIO_SUFFIXES)}), a scenario file (.toml/.json) or "
        "builtin:NAME",
    )
