"""`rig merge OUT SHARD_DIR...`: shard run directories combined into one run directory.

How this works
--------------
1. Every shard directory is read (`load_shard`) and compared with the first (`compare`):
   code version, seed, config and targets must agree, and `--shard` runs must be slices of
   the same plan cut the same way. A difference refuses the merge unless `force`; forced,
   the differences are recorded in the merged manifest's `merge.changes`.
2. Each rollout is taken from one shard. A rollout found in more than one shard is a
   duplicate: the first finished copy (`ok`/`no_audio`, in argument order) is kept, all are
   reported. Rollouts a shard planned but never started, and shards of an N-way split that
   were not given, are reported as missing.
3. Files are hard-linked where the file system allows (the rig never rewrites a closed
   rollout's files: metrics.json is replaced by rename, so a later resume in the shard
   replaces its own link), copied otherwise; sources are never moved. Attempts moved aside
   (`<id>.failed-N`) come along, so reports count the same retries.
4. The merged `manifest.json` carries the shards' common seed and config (what `rig report`
   needs), each shard's manifest is kept as `manifests/<shard>.json`, and `nodes` /
   `rollout_nodes` say where every rollout ran. Monotonic times (`*_ns`) are per node and
   are never compared across nodes: the merged manifest has none of its own.

Merging again into the same OUT (after rerunning a shard) rebuilds its rollouts; an OUT
that exists and is not a merged run is refused.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rig.errors import ConfigError, DataFileError
from rig.ids import check_id
from rig.recordings.jsonwrite import describe_os_error, write_json_atomic
from rig.recordings.manifest import redact_argv, utc_now
from rig.recordings.resume import describe
from rig.scaleout.shards import ShardRun, compare, load_shard, read_json, rollout_done_status
from rig.status import DONE


@dataclass
class MergeResult:
    out: str
    manifest: dict[str, Any]
    status_counts: dict[str, int]
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    missing_shards: list[int] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    linked: int = 0
    copied: int = 0

    @property
    def complete(self) -> bool:
        return not (self.duplicates or self.missing or self.missing_shards)


def merge(
    out: str,
    shard_dirs: Sequence[str],
    *,
    force: bool = False,
    argv: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> MergeResult:
    """Merge `shard_dirs` into the run directory `out` (see the module docstring)."""
    if not shard_dirs:
        raise ConfigError("rig merge needs at least one shard directory")
    check_id(os.path.basename(os.path.normpath(out)), "merged run directory name")
    shards = [load_shard(d) for d in shard_dirs]
    _check_paths(out, shards)
    changes = [c for s in shards[1:] for c in compare(shards[0], s)]
    if changes and not force:
        raise ConfigError(
            f"the shards differ ({describe(changes)}): merging would report two experiments "
            "as one. Rerun the odd shard, or use --force to merge them anyway (recorded)"
        )
    chosen, duplicates = _choose(shards)
    missing = {rid for s in shards for rid in s.planned() if rid not in chosen}
    result = MergeResult(
        out,
        {},
        {},
        duplicates=duplicates,
        missing=sorted(missing),
        missing_shards=_missing_shards(shards),
        changes=changes,
    )
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, f".rollouts.merging.{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        statuses: dict[str, str] = {}
        for rid, shard in sorted(chosen.items()):
            for src in [shard.rollouts[rid], *shard.attempts.get(rid, [])]:
                result.linked, result.copied = _link_tree(
                    src, os.path.join(tmp, os.path.basename(src)), result.linked, result.copied
                )
            statuses[rid] = rollout_done_status(shard.rollouts[rid]) or "missing"
        result.status_counts = dict(Counter(statuses.values()))
        result.manifest = {**_manifest(out, shards, chosen, result, argv), **(extra or {})}
        os.makedirs(os.path.join(out, "manifests"), exist_ok=True)
        names = _manifest_names(shards)
        for shard, name in zip(shards, names, strict=True):
            write_json_atomic(os.path.join(out, "manifests", f"{name}.json"), shard.manifest)
        _swap_in(tmp, os.path.join(out, "rollouts"))
        write_json_atomic(os.path.join(out, "manifest.json"), result.manifest)
    except OSError as exc:
        raise DataFileError(out, f"merge failed: {describe_os_error(exc)}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _check_paths(out: str, shards: list[ShardRun]) -> None:
    """OUT is new, empty or an earlier merge, and neither a shard nor inside one."""
    real_out = os.path.realpath(out)
    for s in shards:
        real = os.path.realpath(s.path)
        if real_out == real or real_out.startswith(real + os.sep):
            raise ConfigError(f"{out}: the merged run cannot be (inside) shard {s.path}")
    if os.path.isdir(out) and os.listdir(out):
        try:
            previous = load_shard(out).manifest
        except (ConfigError, DataFileError):
            previous = {}
        if "merge" not in previous:
            raise ConfigError(f"{out} exists and is not a merged run: give a new directory")


def _choose(shards: list[ShardRun]) -> tuple[dict[str, ShardRun], dict[str, list[str]]]:
    """rollout id -> the shard its copy comes from; duplicates: id -> every shard holding it."""
    holders: dict[str, list[ShardRun]] = {}
    for s in shards:
        for rid in s.rollouts:
            holders.setdefault(rid, []).append(s)
    chosen: dict[str, ShardRun] = {}
    duplicates: dict[str, list[str]] = {}
    for rid, found in holders.items():
        done = [s for s in found if rollout_done_status(s.rollouts[rid]) in DONE]
        chosen[rid] = (done or found)[0]
        if len(found) > 1:
            duplicates[rid] = [s.path for s in found]
    return chosen, duplicates


def _missing_shards(shards: list[ShardRun]) -> list[int]:
    """Indices of an N-way `--shard` split that no given directory holds."""
    counts, seen = set(), set()
    for s in shards:
        sh = s.manifest.get("shard")
        if isinstance(sh, dict) and isinstance(sh.get("count"), int):
            counts.add(sh["count"])
            seen.add(sh.get("index"))
    if len(counts) != 1:
        return []
    return [k for k in range(counts.pop()) if k not in seen]


def _link_tree(src: str, dst: str, linked: int, copied: int) -> tuple[int, int]:
    """Hard-link every file of `src` into `dst` (copy where linking is refused)."""
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(s) and not os.path.islink(s):
            linked, copied = _link_tree(s, d, linked, copied)
            continue
        try:
            os.link(s, d, follow_symlinks=False)
            linked += 1
        except OSError:  # another file system (EXDEV), no links allowed (EPERM): a copy
            shutil.copy2(s, d, follow_symlinks=False)
            copied += 1
    return linked, copied


def _swap_in(new: str, target: str) -> None:
    """Replace `target` (an earlier merge's rollouts: links and copies) by `new`."""
    old = f"{target}.old.{os.getpid()}"
    if os.path.isdir(target):
        os.rename(target, old)
    os.rename(new, target)
    shutil.rmtree(old, ignore_errors=True)


def _manifest_names(shards: list[ShardRun]) -> list[str]:
    """`manifests/<name>.json` names: the shard directory names, made unique."""
    names: list[str] = []
    for s in shards:
        name, n = s.name, 2
        while name in names:
            name, n = f"{s.name}-{n}", n + 1
        names.append(name)
    return names


def _node_of(shard: ShardRun, rollout_dir: str) -> dict[str, Any]:
    """Where a rollout ran: its metrics.json's host/node/shard, else its shard manifest's."""
    try:
        m = read_json(os.path.join(rollout_dir, "metrics.json"))
    except (OSError, ValueError):
        m = {}
    m = m if isinstance(m, dict) else {}
    host = m.get("host") or shard.manifest.get("host")
    return {
        "host": host,
        "node": m.get("node") or shard.manifest.get("node") or host,
        "shard": m.get("shard") or shard.label,
    }


def _manifest(
    out: str,
    shards: list[ShardRun],
    chosen: dict[str, ShardRun],
    result: MergeResult,
    argv: Sequence[str] | None,
) -> dict[str, Any]:
    first = shards[0].manifest
    names = _manifest_names(shards)
    rollouts: dict[str, Any] = {}
    targets: list[Any] = []
    for s in shards:
        ro = s.manifest.get("rollouts")
        rollouts.update(ro if isinstance(ro, dict) else {})
        for t in s.manifest.get("targets") or []:
            if t not in targets:
                targets.append(t)
    rollout_nodes = {rid: _node_of(s, s.rollouts[rid]) for rid, s in sorted(chosen.items())}
    nodes: dict[str, dict[str, Any]] = {}
    for s, name in zip(shards, names, strict=True):
        node = str(s.manifest.get("node") or s.manifest.get("host"))
        entry = nodes.setdefault(
            node,
            {
                "host": s.manifest.get("host"),
                "cpu_count": s.manifest.get("cpu_count"),
                "shards": [],
            },
        )
        entry["shards"].append(
            {
                "shard": s.label,
                "manifest": f"manifests/{name}.json",
                "scheduling": s.manifest.get("scheduling"),
            }
        )
    started = [s.manifest.get("started_utc") for s in shards]
    ended = [s.manifest.get("ended_utc") for s in shards]
    shard_status = [s.manifest.get("status") for s in shards]
    return {
        "run_id": os.path.basename(os.path.normpath(out)),
        "rig_version": first.get("rig_version"),
        "git_sha": first.get("git_sha"),
        "python": first.get("python"),
        "seed": first.get("seed"),
        "argv": redact_argv(list(argv if argv is not None else sys.argv)),
        "config": first.get("config"),
        "targets": targets,
        "rollouts": rollouts,
        "started_utc": min((x for x in started if isinstance(x, str)), default=None),
        "ended_utc": max((x for x in ended if isinstance(x, str)), default=None),
        "started_ns": None,
        "ended_ns": None,
        "clock": "per node: monotonic times (*_ns) are never compared across nodes; each "
        "shard's manifest (manifests/) holds its own",
        "status": "done"
        if result.complete and all(x == "done" for x in shard_status)
        else "incomplete",
        "status_counts": result.status_counts,
        "nodes": nodes,
        "rollout_nodes": rollout_nodes,
        "merge": {
            "merged_utc": utc_now(),
            "shards": [
                {
                    "dir": s.path,
                    "run_id": s.manifest.get("run_id"),
                    "shard": s.label,
                    "status": s.manifest.get("status"),
                    "manifest": f"manifests/{n}.json",
                }
                for s, n in zip(shards, names, strict=True)
            ],
            "forced": bool(result.changes),
            "changes": result.changes,
            "duplicates": result.duplicates,
            "missing": result.missing,
            "missing_shards": result.missing_shards,
            "files_linked": result.linked,
            "files_copied": result.copied,
        },
    }
