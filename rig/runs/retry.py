"""Running a rollout again when its own timing was not valid (`--retry-invalid N`).

A rollout the rig itself failed (a host pause, a stalled loop, a lagging writer) measures
the rig, not the system; running it again, with the failed attempt kept beside as
`<id>.failed-K`, keeps a whole run usable on a machine with rare whole-VM pauses
(docs/pacing.md). Rollouts whose timing was valid are never run again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


def redo_invalid(metrics: Any, attempts: int, limit: int) -> bool:
    """A finished rollout a resume runs again: its own timing was not valid, and the
    limit allows more attempts than are already beside it."""
    return isinstance(metrics, dict) and metrics.get("timing_valid") is False and attempts < limit


async def run_with_retries(
    rollout_id: str,
    run_once: Callable[[], Awaitable[dict[str, Any]]],
    limit: int,
    stopped: Callable[[], bool],
    progress: Callable[[str], None],
    retried: dict[str, int],
) -> dict[str, Any]:
    """Run once, then again while the timing was not valid, until `limit` retries in all.
    `retried` holds how many times each rollout was run again (the manifest's), a resume's
    redo of a recorded attempt already counted in it."""
    tries = retried.get(rollout_id, 0)
    result = await run_once()
    while result.get("timing_valid") is False and tries < limit and not stopped():
        tries += 1
        retried[rollout_id] = tries
        progress(
            f"{rollout_id}: its own timing was not valid; running it again "
            f"(retry {tries} of {limit}, the attempt kept beside)"
        )
        result = await run_once()
    return result
