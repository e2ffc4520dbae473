"""`rig run --sweep KEY=V1,V2,...`: the same scenario over a grid of dialect options.

Why: turn detection is what teams tune most (server VAD silence, semantic VAD eagerness), and
a setting is only judged against another one measured the same way, in the same run. Each
setting becomes a labelled group of rollouts in one run directory (metrics `setting`,
rollout ids suffixed with it); `rig report` puts the groups side by side.

Several `--sweep` flags make the product of their values. Values parse like `--dialect-opt`
(JSON where they parse, else strings); a comma separates values, so list values are not
sweepable this way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from rig.errors import ConfigError
from rig.ids import safe_id

#: more settings than this is a typo (a grid of grids), not a comparison
MAX_SETTINGS = 64


def parse_sweep(pairs: list[str] | None) -> list[dict[str, Any]]:
    """The settings a `--sweep` list spans, in the order given (empty: no sweep)."""
    from rig import safejson

    axes: list[tuple[str, list[Any]]] = []
    for pair in pairs or []:
        key, eq, values = pair.partition("=")
        key = key.strip()
        raw = [v.strip() for v in values.split(",")]
        if not eq or not key or not all(raw):
            raise ConfigError(f"--sweep wants KEY=V1,V2,..., got {pair!r}")
        if any(key == k for k, _ in axes):
            raise ConfigError(f"--sweep {key} given twice")
        parsed: list[Any] = []
        for v in raw:
            try:
                parsed.append(safejson.parse(v))
            except ValueError:
                parsed.append(v)
        if len(set(map(repr, parsed))) != len(parsed):
            raise ConfigError(f"--sweep {key}: a value is repeated ({values})")
        axes.append((key, parsed))
    if not axes:
        return []
    settings = [
        dict(zip([k for k, _ in axes], combo, strict=True))
        for combo in itertools.product(*(vals for _, vals in axes))
    ]
    if len(settings) > MAX_SETTINGS:
        raise ConfigError(f"--sweep spans {len(settings)} settings (at most {MAX_SETTINGS})")
    return settings


def checked_settings(
    pairs: list[str] | None, transport: str, dialect: str, options: dict[str, Any]
) -> list[dict[str, Any]]:
    """`--sweep` pairs parsed, every setting accepted by the dialect before anything runs."""
    from rig.dialects import get_dialect

    settings = parse_sweep(pairs)
    if settings and transport != "ws":
        raise ConfigError("--sweep varies dialect options: WebSocket targets only")
    for setting in settings:
        try:
            get_dialect(dialect, **{**options, **setting})
        except TypeError as exc:
            raise ConfigError(f"dialect {dialect!r} does not take {setting}: {exc}") from exc
    return settings


def swept_runs(
    pairs: list[str] | None,
    transport: str,
    dialect: str,
    options: dict[str, Any],
    runs: Iterable[tuple[str, Any, int]],
) -> list[tuple[dict[str, Any], str, Any, int]]:
    """(setting, rollout id, item, repeat) for every run under every setting, settings
    outermost; without a sweep each run once under the empty setting."""
    each = list(runs)
    settings = checked_settings(pairs, transport, dialect, options) or [{}]
    return [(s, rid, item, rep) for s in settings for rid, item, rep in each]


def swept_id(rollout_id: str, setting: dict[str, Any]) -> str:
    """The rollout id under a setting (unchanged without a sweep)."""
    return f"{rollout_id}.{setting_suffix(setting)}" if setting else rollout_id


def sweep_meta(setting: dict[str, Any]) -> dict[str, Any]:
    """What a swept rollout's metrics carry: the label reports group by, and the values."""
    return {"setting": setting_label(setting), "sweep": setting} if setting else {}


def setting_label(setting: dict[str, Any]) -> str:
    """`key=value,key2=value2`: how reports name a setting."""
    return ",".join(f"{k}={_text(v)}" for k, v in setting.items())


def setting_suffix(setting: dict[str, Any]) -> str:
    """The rollout-id part naming a setting (an id: letters, digits, `_ - .`)."""
    return safe_id("-".join(f"{k}-{_text(v)}" for k, v in setting.items()))


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "null" if v is None else str(v)
