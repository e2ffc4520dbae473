"""What a run directory says about its rollouts: finished or not, attempts moved aside.

Why here: the runner decides what to redo from these, and engines and tools (resume, merge)
must read the same answer from the same files.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from rig import safejson
from rig.ids import attempt_name, count_retries
from rig.status import DONE as DONE_STATUSES


def rollout_done(rollout_dir: str) -> bool:
    """Does this rollout's metrics.json say it finished? (Anything unreadable: no.)"""
    return done_status(rollout_dir) is not None


def done_status(rollout_dir: str) -> str | None:
    """The status of a finished rollout (one a resume skips), else None."""
    try:
        with open(os.path.join(rollout_dir, "metrics.json"), "rb") as f:
            m = safejson.parse(f.read())
    except (OSError, ValueError):
        return None
    if isinstance(m, dict) and m.get("status") in DONE_STATUSES:
        return str(m["status"])
    return None


def attempt_counts(rollouts_dir: str) -> dict[str, int]:
    """Rollout id -> earlier attempts kept beside it (`<id>.failed-K`); none: {}."""
    try:
        return count_retries(os.listdir(rollouts_dir))
    except OSError:
        return {}


def move_aside(d: str) -> None:
    """A failed or partial earlier attempt: keep it beside as `<id>.failed-N`, redo."""
    if os.path.isdir(d):
        parent, rid = os.path.split(d)
        attempt = 1
        while os.path.exists(os.path.join(parent, attempt_name(rid, attempt))):
            attempt += 1
        shutil.move(d, os.path.join(parent, attempt_name(rid, attempt)))


def read_json(path: str) -> Any:
    """A JSON file the rig wrote; ValueError (safejson.JsonInputError) if it is not JSON."""
    with open(path, "rb") as f:
        return safejson.parse(f.read())
