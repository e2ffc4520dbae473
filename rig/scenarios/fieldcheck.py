"""Typed reads of a parsed scenario mapping, each failure a ScenarioError naming file and field.

Shared by the scenario file format and its benchmark fields, so every field reports its
problems in the same one-line form (`items[2].steps[1].offset_s: must be >= 0, got -1`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.errors import ScenarioError

MAX_DURATION_S = 3600.0
MAX_CAP_S = 86_400.0


class FieldCheck:
    """Typed reads from a parsed mapping; every failure names the file and field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, reason: str) -> ScenarioError:
        return ScenarioError(self.source, reason, where)

    def table(self, obj: Any, where: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise self.fail(where, f"must be a table, got {type_name(obj)}")
        unknown = sorted(set(obj) - allowed)
        if unknown:
            raise self.fail(
                f"{where}.{unknown[0]}" if where else unknown[0],
                f"unknown key; allowed here: {', '.join(sorted(allowed))}",
            )
        return obj

    def number(
        self,
        t: dict[str, Any],
        key: str,
        where: str,
        default: float | None = None,
        *,
        pos: bool,
        hi: float | None = None,
    ) -> float:
        v = t.get(key, default)
        w = f"{where}.{key}"
        if v is None:
            raise self.fail(w, "required")
        if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
            raise self.fail(w, f"must be a number, got {type_name(v)}")
        if v < 0 or (pos and v == 0):
            raise self.fail(w, f"must be {'> 0' if pos else '>= 0'}, got {v}")
        limit = (
            hi
            if hi is not None
            else (MAX_CAP_S if key.endswith(("max_s", "timeout_s")) else MAX_DURATION_S)
        )
        if v > limit:
            raise self.fail(w, f"must be at most {limit:g}, got {v:g}")
        return float(v)

    def string(self, t: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
        v = t.get(key, default)
        if v is None:
            raise self.fail(f"{where}.{key}", "required")
        if not isinstance(v, str):
            raise self.fail(f"{where}.{key}", f"must be a string, got {type_name(v)}")
        return v

    def boolean(self, t: dict[str, Any], key: str, where: str, default: bool) -> bool:
        v = t.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(f"{where}.{key}", f"must be true or false, got {type_name(v)}")
        return v


def type_name(v: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(v), type(v).__name__
    )
