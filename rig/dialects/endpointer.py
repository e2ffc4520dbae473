"""Endpointer settings shared by the hosted dialects: one range check, one error wording.

The hosted systems' server-side endpointers (OpenAI/Grok `turn_detection`, Gemini
`automaticActivityDetection`) take their timing knobs in whole milliseconds; a value outside
0..60000 is a typo, not a setting, and is refused before anything runs (docs/dialects.md).
"""

from __future__ import annotations

from rig.errors import ConfigError

#: endpointer milliseconds a server takes (beyond this a typo, not a setting)
MAX_ENDPOINT_MS = 60_000


def check_ms(dialect: str, name: str, v: object) -> int | None:
    """An endpointer setting in whole milliseconds, 0..60000 (None: the server's default)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_ENDPOINT_MS:
        raise ConfigError(
            f"{dialect}: {name} must be an integer of milliseconds in [0, {MAX_ENDPOINT_MS}], "
            f"got {v!r}"
        )
    return v
