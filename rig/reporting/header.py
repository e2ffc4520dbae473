"""What a report says first about how its run was made, when a reader could miss it: a run
behind `--impair` measured a bad network on purpose, and its numbers are not the system's
own (docs/network.md)."""

from __future__ import annotations

from typing import Any


def _direction(d: Any) -> str:
    if not isinstance(d, dict):
        return "?"
    parts = []
    for key, unit in (("delay_ms", "ms delay"), ("jitter_ms", "ms jitter")):
        if d.get(key):
            parts.append(f"{d[key]:g} {unit}")
    if d.get("loss"):
        parts.append(f"{100 * d['loss']:g}% loss")
    if d.get("rate_bps"):
        parts.append(f"{d['rate_bps'] / 1e6:g} Mbit/s")
    return ", ".join(parts) or "none"


def _impairment(label: str, imp: Any) -> str | None:
    if not imp:
        return None
    if not isinstance(imp, dict):
        return f"network impaired on purpose ({label}): {imp}"
    name = imp.get("profile") or imp.get("spec") or "custom"
    return (
        f"network impaired on purpose ({label}): {name}; up {_direction(imp.get('up'))}; "
        f"down {_direction(imp.get('down'))} (latencies include it; docs/network.md)"
    )


def header_lines(manifest: dict[str, Any] | None) -> list[str]:
    """Lines for the top of `rig report`: each impairment the run was made behind."""
    config = manifest.get("config") if isinstance(manifest, dict) else None
    if not isinstance(config, dict):
        return []
    found = (
        _impairment("--impair", config.get("impair")),
        _impairment("--impair, upstream", config.get("impair_upstream")),
        _impairment("--impair-client", config.get("impair_client")),
    )
    return [line for line in found if line]
