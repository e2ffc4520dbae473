"""Dialects: how one family of systems frames audio and events on a WebSocket.

A dialect is sans-I/O: it turns uplink PCM and control requests into messages, and incoming
messages (with their arrival time) into `DownAudio` / `DownEvent` items. The WebSocket
transport does the I/O. `get_dialect(name)` finds one by name.
"""

from __future__ import annotations

import importlib
from typing import Any

from rig.dialects.base import Dialect
from rig.errors import ConfigError

#: dialect name -> module under rig.dialects exposing `create(**options) -> Dialect`
DIALECTS: dict[str, str] = {
    "rig": "rawpcm",
    "raw": "rawpcm",
    "openai": "openai",
    "grok": "grok",
    "gemini": "gemini",
    "moshi": "moshi",
    "pipecat": "pipecat",
}


def get_dialect(name: str, **options: Any) -> Dialect:
    module_name = DIALECTS.get(name)
    if module_name is None:
        raise ConfigError(f"unknown dialect {name!r}; known: {', '.join(sorted(DIALECTS))}")
    try:
        module = importlib.import_module(f"rig.dialects.{module_name}")
    except ModuleNotFoundError as exc:
        raise ConfigError(f"dialect {name!r} is not available ({exc})") from exc
    if name == "raw":
        options.setdefault("framing", "raw")
    dialect: Dialect = module.create(**options)
    return dialect
