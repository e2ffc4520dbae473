"""Reading shard run directories and checking that they belong to one experiment.

Why refuse: shards recorded by another code version, with another configuration or another
seed would be reported as one run while they are two experiments (the seed also drives the
report's bootstrap). `compare` lists every difference against the first shard, the same way
a resume is checked (rig.recordings.resume: operational settings such as concurrency,
engine or shard do not count); `rig merge` refuses unless `--force`, and then records them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rig import safejson
from rig.errors import ConfigError, DataFileError
from rig.ids import rollout_of_attempt
from rig.recordings import resume

#: manifest fields that must agree between shards (code version and seed); config and
#: targets are compared by rig.recordings.resume.changes
SAME: tuple[str, ...] = ("rig_version", "git_sha", "seed")


@dataclass(frozen=True, slots=True)
class ShardRun:
    """One shard's run directory as found on disk."""

    path: str
    manifest: dict[str, Any]
    #: rollout id -> its directory (attempts moved aside are listed in `attempts`)
    rollouts: dict[str, str]
    attempts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    @property
    def label(self) -> str:
        """`K/N` for a `--shard` run, the directory name for any other run."""
        shard = self.manifest.get("shard")
        if isinstance(shard, dict) and isinstance(shard.get("label"), str):
            return str(shard["label"])
        return self.name

    def planned(self) -> list[str]:
        """The rollouts this shard was asked to run (its manifest's `rollouts`)."""
        ro = self.manifest.get("rollouts")
        return sorted(ro) if isinstance(ro, dict) else sorted(self.rollouts)


def read_json(path: str) -> Any:
    with open(path, "rb") as f:
        return safejson.parse(f.read(), max_bytes=256 << 20)


def load_shard(path: str) -> ShardRun:
    """A run directory with a manifest.json; DataFileError/ConfigError naming it otherwise."""
    manifest_path = os.path.join(path, "manifest.json")
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: not a run directory")
    try:
        manifest = read_json(manifest_path)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no manifest.json (not a run directory)") from exc
    except (OSError, ValueError) as exc:
        raise DataFileError(manifest_path, f"unreadable: {exc}") from exc
    if not isinstance(manifest, dict):
        raise DataFileError(manifest_path, "not a JSON object")
    base = os.path.join(path, "rollouts")
    rollouts: dict[str, str] = {}
    attempts: dict[str, list[str]] = {}
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    for name in names:
        full = os.path.join(base, name)
        if not os.path.isdir(full):
            continue
        owner = rollout_of_attempt(name)
        if owner is None:
            rollouts[name] = full
        else:
            attempts.setdefault(owner, []).append(full)
    return ShardRun(path, manifest, rollouts, attempts)


def compare(first: ShardRun, other: ShardRun) -> list[dict[str, Any]]:
    """What differs between two shards' experiments (`field`, `before`, `after`, `shard`)."""
    out = [
        {"field": key, "before": first.manifest.get(key), "after": other.manifest.get(key)}
        for key in SAME
        if first.manifest.get(key) != other.manifest.get(key)
    ]
    out += resume.changes(first.manifest, other.manifest)
    a, b = first.manifest.get("shard"), other.manifest.get("shard")
    for key in ("count", "plan_digest"):  # the same plan, cut the same way
        va = a.get(key) if isinstance(a, dict) else None
        vb = b.get(key) if isinstance(b, dict) else None
        if va != vb:
            out.append({"field": f"shard.{key}", "before": va, "after": vb})
    return [{**c, "shard": other.path} for c in out]


def rollout_done_status(rollout_dir: str) -> str | None:
    """The status in a rollout's metrics.json (None: missing or unreadable)."""
    try:
        m = read_json(os.path.join(rollout_dir, "metrics.json"))
    except (OSError, ValueError):
        return None
    status = m.get("status") if isinstance(m, dict) else None
    return status if isinstance(status, str) else None
