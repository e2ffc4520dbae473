"""Conversation history given as text: the preload for systems that take text items.

A scenario item's history is a list of `{"role": "user"|"assistant"|"system", "text": ...}`.
Dialects that can take it (OpenAI/Grok `conversation.item.create`, Gemini `clientContent`)
send it once the session is configured and before the first audio frame; the others refuse it
at configuration time, so an item is never run without the context it asks for.
"""

from __future__ import annotations

from rig.core.events import DownEvent
from rig.errors import ConfigError

ROLES = ("user", "assistant", "system")


def check_history(history: object, where: str = "history") -> list[dict[str, str]]:
    """The history as a clean list of role/text dicts; ConfigError naming the bad entry."""
    if not isinstance(history, list):
        raise ConfigError(f"{where}: must be a list of {{role, text}} entries")
    out = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict) or set(entry) != {"role", "text"}:
            raise ConfigError(f"{where}[{i}]: must have exactly the keys role and text")
        role, text = entry["role"], entry["text"]
        if role not in ROLES:
            raise ConfigError(f"{where}[{i}].role: one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{where}[{i}].text: must be a non-empty string")
        out.append({"role": role, "text": text})
    return out


def history_sent(history: list[dict[str, str]], t_ns: int) -> DownEvent:
    """The `history.sent` event (the rig's own doing, so source "rig"): roles and sizes, not
    the text, which the manifest's rollout meta holds already."""
    data = {"items": len(history), "roles": [h["role"] for h in history]}
    return DownEvent("history.sent", t_ns, data, source="rig")
