"""What a run must refuse or warn about for its scenario items, before anything runs.

How this works: `check_items` is called once per `rig run` with the run's dialect, transport
and `--dialect-opt`s. Per item it builds the dialect with the item's own `options` merged
over the run's (and its text history and own track, where it has them), so a bad value or an
option the dialect does not have is one ConfigError naming the item, not a failed rollout.
A two-channel prefill (`prefill_channels`) is refused where the transport or the dialect
cannot carry the system's own past track. A fast prefill (`prefill_speed` > 1) to a dialect
whose server steps in real time (Moshi) is a warning, also recorded in the item's meta
(`warnings`): its input piles up and the live part reaches the model late.
"""

from __future__ import annotations

from typing import Any

from rig.dialects import get_dialect
from rig.dialects.base import Dialect
from rig.errors import ConfigError
from rig.scenarios.item import ScenarioItem


def item_dialect_options(item: ScenarioItem) -> dict[str, Any]:
    """What an item adds to the run's dialect options: its own options, history, own track."""
    out: dict[str, Any] = dict(item.meta.get("options") or {})
    if item.meta.get("history"):
        out["history"] = item.meta["history"]
    if item.own_track is not None:
        out["own_track"] = item.own_track
    return out


def _build(dialect: str, options: dict[str, Any], item: ScenarioItem) -> Dialect:
    own = options.get("own_track")
    try:
        return get_dialect(dialect, **options)
    except TypeError as exc:
        if own is not None and "own_track" in str(exc):
            raise ConfigError(
                f"item {item.item_id}: dialect {dialect!r} cannot take the system's own past "
                "track (prefill_channels); give the prefill one channel (prefill_channel) or "
                "the history as text"
            ) from exc
        if "history" in str(exc):
            raise ConfigError(
                f"item {item.item_id}: dialect {dialect!r} takes no text history; "
                "give the history as prefill audio"
            ) from exc
        raise ConfigError(
            f"item {item.item_id}: dialect {dialect!r} does not take these options: {exc}"
        ) from exc
    except ConfigError as exc:
        raise ConfigError(f"item {item.item_id}: options: {exc}") from exc


def check_items(
    items: list[ScenarioItem], *, dialect: str, transport: str, options: dict[str, Any]
) -> list[str]:
    """Refuse what cannot run (ConfigError); return the warnings (also put in item meta)."""
    warnings: list[str] = []
    for item in items:
        own = item.own_track is not None
        if transport != "ws":
            if own:
                raise ConfigError(
                    f"item {item.item_id}: a two-channel prefill (prefill_channels) needs a "
                    f"WebSocket dialect that takes the system's own past track; --transport "
                    f"{transport} carries one channel"
                )
            if item.meta.get("options"):
                raise ConfigError(
                    f"item {item.item_id}: per-item options are dialect options: they need "
                    f"--transport ws, not {transport}"
                )
            continue
        d = _build(dialect, {**options, **item_dialect_options(item)}, item)
        speed = float(item.session.get("prefill_speed", 1.0))
        if d.steps_in_real_time and speed > 1.0 and item.meta.get("prefill_speed"):
            why = (
                f"item {item.item_id}: prefill_speed {speed:g} to dialect {dialect!r}, whose "
                "server steps through its input in real time: the prefill piles up in its "
                "input and the live part reaches the model late; use prefill_speed = 1"
            )
            warnings.append(why)
            item.meta.setdefault("warnings", []).append(why)
    return warnings
