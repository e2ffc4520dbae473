"""metrics.json: written in one place, once per rollout, by the runner (rig.runs.runner)
from the session's metrics and log plus the analysis result; `run_alone` is the same for a
session run on its own (tests, tools). The session never writes it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rig.analysis.finish import analyze_log
from rig.recordings.jsonwrite import write_json_atomic
from rig.redact import redact_text
from rig.session import Session


async def run_alone(session: Session) -> dict[str, Any]:
    """One session on its own (tests, tools): the stream, then what the runner does after it
    without an analysis worker: the latency split in a thread, metrics.json written once."""
    metrics = await session.run()
    metrics = await asyncio.to_thread(analyze_log, metrics, session.log)
    metrics = redacted(metrics)
    await asyncio.to_thread(write_metrics_json, session.rollout_dir, metrics)
    session.sink.results(metrics)
    return metrics


def redacted(metrics: dict[str, Any]) -> dict[str, Any]:
    for key in ("reason", "session_reason"):  # free text: error messages may hold URLs
        if isinstance(metrics.get(key), str):
            metrics = {**metrics, key: redact_text(metrics[key])}
    return metrics


def write_metrics_json(rollout_dir: str, metrics: dict[str, Any]) -> None:
    """metrics.json, the one place it is written (blocking: call it off the loop)."""
    os.makedirs(rollout_dir, exist_ok=True)
    write_json_atomic(os.path.join(rollout_dir, "metrics.json"), metrics)
