"""`rig.run`'s keywords -> a RunConfig: each checked by the kind its field declares, with a
did-you-mean hint for a misspelt name (the API's way in; the CLI's is rig.cli.runopts)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from rig.errors import ConfigError
from rig.runs.config import (
    ALIASES,
    DEMO_CONCURRENCY,
    OPTION_FIELDS,
    TOLERANCE_OPTIONS,
    RunConfig,
    flag,
    int_or_auto,
)
from rig.shard import Shard


def option_names() -> list[str]:
    """Every keyword `rig.run` takes (besides the scenario)."""
    return sorted(set(OPTION_FIELDS) - {"scenario"} | set(TOLERANCE_OPTIONS) | set(ALIASES))


def from_keywords(scenario: str, options: Mapping[str, Any]) -> RunConfig:
    """The API's way in: keyword options checked by kind, with a did-you-mean hint for a
    misspelt name (ConfigError names the option and its flag)."""
    if not isinstance(scenario, str) or not scenario:
        raise ConfigError(f"scenario must be a path or builtin:NAME, got {scenario!r}")
    flat: dict[str, Any] = {}
    for key, value in options.items():
        name = ALIASES.get(key, key)
        if name not in OPTION_FIELDS and name not in TOLERANCE_OPTIONS or name == "scenario":
            near = difflib.get_close_matches(key, option_names(), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"rig.run: unknown option {key!r}{hint}")
        if name == "dialect_opt" and isinstance(value, dict):
            value = [_dialect_pair(k, v) for k, v in value.items()]
        if value is not None:
            value = check_kind(key, name, value)
        flat[name] = value
    if flat.get("concurrency") is None and flat.get("transport") != "device":
        flat["concurrency"] = DEMO_CONCURRENCY  # as `rig demo`: one sound card is one rollout
    return RunConfig.from_options(flat, scenario=scenario)


def check_kind(key: str, name: str, value: Any) -> Any:
    """The value as the parser would have it, or ConfigError naming the option."""
    if name in TOLERANCE_OPTIONS:
        kind: Any = float
        choices: tuple[Any, ...] = ()
    else:
        meta = OPTION_FIELDS[name][1].metadata
        kind, choices = meta["kind"], meta["choices"]
    where = f"{key} ({flag(name)})"
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"rig.run: {where} must be True or False, got {value!r}")
        return value
    if kind is list:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"rig.run: {where} must be a list of strings, got {value!r}")
        return list(value)
    if kind == "int|auto" or kind is Shard:  # strings go through the parser's function
        if isinstance(value, str):
            if kind is Shard:
                return value
            try:
                return int_or_auto(value)
            except ValueError as exc:
                raise ConfigError(f"rig.run: {where}: {exc}") from exc
        return value
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        what = "an integer"
    elif kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        what = "a number"
    else:
        ok = isinstance(value, str)
        what = "a string"
    if not ok:
        raise ConfigError(f"rig.run: {where} must be {what}, got {value!r}")
    if choices and value not in choices:
        raise ConfigError(
            f"rig.run: {where} must be one of {', '.join(map(str, choices))}, got {value!r}"
        )
    return value


def _dialect_pair(key: Any, value: Any) -> str:
    """`{"voice": "123"}` -> `voice="123"`: values go as JSON, so a string stays a string
    (on the command line `voice=123` would be the number)."""
    if not isinstance(key, str) or not key.strip() or "=" in key:
        raise ConfigError(f"rig.run: dialect_options keys must be names, got {key!r}")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"rig.run: dialect_options[{key!r}] is not JSON: {exc}") from exc
    return f"{key}={text}"
