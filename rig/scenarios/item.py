"""One scenario item: a user plan with its metadata and session overrides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rig.core.plan import UserPlan


@dataclass
class ScenarioItem:
    item_id: str
    plan: UserPlan
    meta: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)
