"""What must match for a resume to add to an existing run directory (sans-I/O).

Why: a run resumed against another target, scenario or session setting would silently mix
results of two experiments under one manifest. `changes(previous, current)` lists every
difference between the manifest already on disk and the one about to be written, except
operational settings that do not shape a rollout's results (how many run at once, the live
view, real-time priority, telemetry). The runner refuses a resume with changes unless told
to force it, and then records them in `resumed_from.changes`.
"""

from __future__ import annotations

import json
from typing import Any

from rig.errors import ConfigError

#: config keys that change how a run is executed or shown, not what a rollout measures
OPERATIONAL = frozenset(
    {
        "concurrency",
        "connect_concurrency",
        "start_interval_s",
        "analyze",
        "rt_priority",
        "headless",
        "mqtt",
        "force_resume",
        "retry_invalid",
        "host_watch",
    }
)


def _norm(obj: Any) -> Any:
    """As it reads back from JSON (tuples become lists, numpy numbers plain)."""
    return json.loads(json.dumps(obj, default=str))


def changes(previous: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Differences that matter, as `{"field", "before", "after"}` (empty: same experiment)."""
    out: list[dict[str, Any]] = []
    before_targets = _norm(previous.get("targets") or [])
    after_targets = _norm(current.get("targets") or [])
    if not isinstance(before_targets, list) or any(t not in before_targets for t in after_targets):
        out.append({"field": "targets", "before": before_targets, "after": after_targets})
    cfg = previous.get("config")
    before_cfg: dict[str, Any] = cfg if isinstance(cfg, dict) else {}
    after_cfg = _norm(current.get("config") or {})
    for key in sorted(set(before_cfg) | set(after_cfg)):
        if key in OPERATIONAL:
            continue
        if before_cfg.get(key) != after_cfg.get(key):
            out.append(
                {
                    "field": f"config.{key}",
                    "before": before_cfg.get(key),
                    "after": after_cfg.get(key),
                }
            )
    ro = previous.get("rollouts")
    before_ro: dict[str, Any] = ro if isinstance(ro, dict) else {}
    after_ro = _norm(current.get("rollouts") or {})
    for rid in sorted(set(before_ro) & set(after_ro)):
        for part in ("plan", "meta"):
            b = before_ro[rid].get(part) if isinstance(before_ro[rid], dict) else None
            a = after_ro[rid].get(part)
            if b != a:
                out.append({"field": f"rollouts.{rid}.{part}", "before": b, "after": a})
    return out


def describe(found: list[dict[str, Any]], limit: int = 4) -> str:
    """`targets: [...] -> [...]; config.scenario: 's1' -> 's2'` (the first `limit`)."""
    parts = [
        f"{c['field']}: {json.dumps(c['before'])[:80]} -> {json.dumps(c['after'])[:80]}"
        for c in found[:limit]
    ]
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return "; ".join(parts) + more


def resumed(
    previous: dict[str, Any], manifest: dict[str, Any], run_dir: str, *, force: bool
) -> dict[str, Any]:
    """The manifest of a run resumed into `run_dir` over `previous`: refused (ConfigError)
    when what must match differs, unless forced; `resumed_from` records the attempt."""
    manifest = dict(manifest)
    changed = changes(previous, manifest)
    if changed and not force:
        raise ConfigError(
            f"{run_dir} was recorded with a different configuration "
            f"({describe(changed)}); resuming would mix two experiments. "
            "Use a new --run-id, or --force-resume to mix them on purpose (recorded)"
        )
    manifest["resumed_from"] = {
        "started_utc": previous.get("started_utc"),
        "status": previous.get("status"),
        "git_sha": previous.get("git_sha"),
        "forced": bool(changed),
        "changes": changed,
        "previous": previous.get("resumed_from"),
    }
    if changed:  # both experiments' targets stay on record
        old = previous.get("targets")
        old_targets = old if isinstance(old, list) else []
        manifest["targets"] = old_targets + [t for t in manifest["targets"] if t not in old_targets]
    return manifest
