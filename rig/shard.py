"""Shards: which of N disjoint slices of a run's rollouts a rollout belongs to (sans-I/O).

Why a hash of the id: the assignment must not depend on the order of the rollouts, on how
many there are, or on the process: Python's `hash()` is salted per process (PYTHONHASHSEED),
so two pods would disagree. `shard_index(rollout_id, n)` is the first 8 bytes of the id's
SHA-256 as a big-endian integer, modulo n: the same on every machine and every Python, so
rerunning shard K redoes exactly the rollouts it had, and the N shards cover every rollout
once. Shards are numbered from 0 (Kubernetes' `JOB_COMPLETION_INDEX` is too).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rig.errors import ConfigError

#: more shards than this is a typo, not a fleet
MAX_SHARDS = 100_000

_SPEC = re.compile(r"\A\s*([0-9]{1,6})\s*/\s*([0-9]{1,6})\s*\Z")


def shard_index(rollout_id: str, count: int) -> int:
    """The shard (0..count-1) that owns `rollout_id`: stable across processes and hosts."""
    digest = hashlib.sha256(rollout_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def ids_digest(rollout_ids: Iterable[str]) -> str:
    """SHA-256 of the sorted ids (one per line): shards of one plan share it."""
    h = hashlib.sha256()
    for rid in sorted(rollout_ids):
        h.update(rid.encode("utf-8") + b"\n")
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Shard:
    """Slice `index` of `count` (0 <= index < count)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS or not 0 <= self.index < self.count:
            raise ConfigError(
                f"--shard {self.index}/{self.count}: want K/N with 0 <= K < N <= {MAX_SHARDS}"
            )

    def owns(self, rollout_id: str) -> bool:
        return shard_index(rollout_id, self.count) == self.index

    @property
    def label(self) -> str:
        """`K/N`, as given on the command line and recorded in metrics.json."""
        return f"{self.index}/{self.count}"

    @property
    def dir_suffix(self) -> str:
        """`shard-K-of-N`: appended to the run id for the shard's run directory."""
        return f"shard-{self.index}-of-{self.count}"

    def describe(self, all_ids: Iterable[str]) -> dict[str, object]:
        """The manifest's `shard` block: which slice, of which plan (for `rig merge`)."""
        ids = list(all_ids)
        mine = [rid for rid in ids if self.owns(rid)]
        return {
            "index": self.index,
            "count": self.count,
            "label": self.label,
            "assignment": "sha256(rollout_id)[:8] mod count",
            "plan_rollouts": len(ids),
            "plan_digest": ids_digest(ids),
            "rollouts": len(mine),
        }


def parse_shard(text: str) -> Shard:
    """`K/N` (e.g. `0/3`, `$JOB_COMPLETION_INDEX/8`) -> Shard; ConfigError otherwise."""
    m = _SPEC.match(text)
    if m is None:
        raise ConfigError(f"--shard wants K/N (e.g. 0/4, shards counted from 0), got {text!r}")
    return Shard(int(m.group(1)), int(m.group(2)))


def split(rollout_ids: Iterable[str], count: int) -> list[list[str]]:
    """The ids of each of `count` shards, in the order given."""
    out: list[list[str]] = [[] for _ in range(count)]
    for rid in rollout_ids:
        out[shard_index(rid, count)].append(rid)
    return out
