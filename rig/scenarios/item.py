"""One scenario item: a user plan with its metadata and session overrides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.plan import UserPlan


@dataclass
class ScenarioItem:
    item_id: str
    plan: UserPlan
    meta: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)
    #: a two-channel prefill's other side: the system's own past track (uplink rate), for a
    #: dialect that takes it (rig.scenarios.runcheck refuses the rest before anything runs)
    own_track: Pcm16 | None = None
    #: input conditions as set in the file (rig.conditions.spec.Condition, source, field):
    #: the item's, and one per Play of the plan in order (None: none set there)
    condition: tuple[Any, str, str] | None = None
    play_conditions: list[tuple[Any, str, str] | None] = field(default_factory=list)
