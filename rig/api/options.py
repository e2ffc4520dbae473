"""Keyword options of `rig.run` -> the RunConfig `rig run` builds from its flags.

The API has no option table of its own: every option, its default and its kind is a
RunConfig field (rig.runs.config), so a new run option is an API option with the same
default the moment it exists, and both front-ends go through the same `check()`.
"""

from __future__ import annotations

from typing import Any

from rig.runs.config import RunConfig
from rig.runs.keywords import from_keywords, option_names

__all__ = ["config", "option_names"]


def config(scenario: str, options: dict[str, Any]) -> RunConfig:
    """The run `rig run SCENARIO` with these options would make (not yet checked).

    Raises ConfigError for an unknown option (with a did-you-mean hint) or a value of the
    wrong kind, naming the option and its flag."""
    return from_keywords(scenario, options)
