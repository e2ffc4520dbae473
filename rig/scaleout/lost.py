"""A shard that died: its unfinished rollouts say so.

Why: a node lost mid-run leaves rollout directories without metrics.json (killed mid-stream)
and rollouts never started; a report must count them, and a rerun must redo exactly them.
`mark_lost` writes, for every rollout of the shard's slice that has no final status, a
metrics.json with status `error` and the reason (`node lost: ...`); rollouts that ended with
any status of their own keep it. A rerun of the shard moves the marked attempts aside
(`<id>.failed-N`, counted as retries) and redoes them; finished rollouts are skipped. The
shard's manifest, left `running` by the dead process, becomes `interrupted` with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from rig.recordings.jsonwrite import write_json_atomic
from rig.scaleout.shards import read_json, rollout_done_status

#: the `reason` prefix of rollouts lost with their node or shard process
NODE_LOST = "node lost"


def mark_lost(
    shard_dir: str, rollout_ids: Iterable[str], reason: str, placement: dict[str, Any]
) -> list[str]:
    """Mark the shard's rollouts that have no status; returns their ids."""
    marked = []
    for rid in rollout_ids:
        d = os.path.join(shard_dir, "rollouts", rid)
        if rollout_done_status(d) is not None:
            continue  # ended with a status of its own (ok or not): kept
        os.makedirs(d, exist_ok=True)
        started = os.path.exists(os.path.join(d, "events.jsonl"))
        metrics = {
            "status": "error",
            "reason": f"{reason} ({'mid-rollout' if started else 'before it started'})",
            "rollout_id": rid,
            "responses": [],
            **placement,
        }
        write_json_atomic(os.path.join(d, "metrics.json"), metrics)
        marked.append(rid)
    manifest_path = os.path.join(shard_dir, "manifest.json")
    try:
        manifest = read_json(manifest_path)
    except (OSError, ValueError):
        manifest = None
    if isinstance(manifest, dict) and manifest.get("status") == "running":
        manifest = {**manifest, "status": "interrupted", "stop_reason": reason}
        write_json_atomic(manifest_path, manifest)
    return marked
