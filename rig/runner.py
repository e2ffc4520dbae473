"""Runs: many rollouts, one run directory, one writer thread, one manifest.

Each rollout is a `Session` with its own transport. A rollout that fails records its status
and reason and never takes the others down; the manifest counts statuses at the end. Resume:
running again into an existing run directory skips rollouts whose metrics.json says `ok`
(or another final, non-error status) and redoes the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rig.clock.base import Clock, MonotonicClock
from rig.plan import UserPlan
from rig.recordings.manifest import build_manifest, utc_now
from rig.recordings.writer import RecordingWriter, write_json_atomic
from rig.session import Publish, Session, SessionConfig
from rig.transports.base import Transport

DONE_STATUSES = frozenset({"ok", "no_audio"})


@dataclass
class RolloutSpec:
    rollout_id: str
    plan: UserPlan
    make_transport: Callable[[Clock, asyncio.Semaphore], Transport]
    target: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    session_config: SessionConfig | None = None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def rollout_done(rollout_dir: str) -> bool:
    try:
        with open(os.path.join(rollout_dir, "metrics.json"), encoding="utf-8") as f:
            return json.load(f).get("status") in DONE_STATUSES
    except (OSError, ValueError):
        return False


class Runner:
    def __init__(
        self,
        out_dir: str,
        *,
        run_id: str | None = None,
        concurrency: int = 1,
        connect_concurrency: int = 8,
        clock: Clock | None = None,
        seed: int = 0,
        config: dict[str, Any] | None = None,
        publish_factory: Callable[[str], Publish] | None = None,
        writer: RecordingWriter | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.run_id = run_id or new_run_id()
        self.run_dir = os.path.join(out_dir, self.run_id)
        self.concurrency = max(1, concurrency)
        self.connect_gate_size = max(1, connect_concurrency)
        self.clock = clock or MonotonicClock()
        self.seed = seed
        self.config = config or {}
        self.publish_factory = publish_factory
        self.writer = writer or RecordingWriter()
        self.progress = progress or (lambda line: None)
        self.results: dict[str, dict[str, Any]] = {}

    async def run(self, specs: Sequence[RolloutSpec]) -> dict[str, Any]:
        os.makedirs(os.path.join(self.run_dir, "rollouts"), exist_ok=True)
        random.seed(self.seed)
        manifest_path = os.path.join(self.run_dir, "manifest.json")
        previous: dict[str, Any] = {}
        if os.path.exists(manifest_path):
            with (
                contextlib.suppress(OSError, ValueError),
                open(manifest_path, encoding="utf-8") as f,
            ):
                previous = json.load(f)
        manifest = build_manifest(
            self.run_id,
            config={
                **self.config,
                "concurrency": self.concurrency,
                "connect_concurrency": self.connect_gate_size,
            },
            targets=_unique_targets(specs),
            seed=self.seed,
            started_ns=self.clock.now_ns(),
        )
        manifest["rollouts"] = {
            s.rollout_id: {"meta": s.meta, "plan": s.plan.describe()} for s in specs
        }
        if previous:
            manifest["resumed_from"] = {
                "started_utc": previous.get("started_utc"),
                "status": previous.get("status"),
                "git_sha": previous.get("git_sha"),
            }
        manifest["status"] = "running"
        write_json_atomic(manifest_path, manifest)

        self.writer.start()
        gate = asyncio.Semaphore(self.concurrency)
        open_gate = asyncio.Semaphore(self.connect_gate_size)
        todo = []
        for spec in specs:
            d = os.path.join(self.run_dir, "rollouts", spec.rollout_id)
            if rollout_done(d):
                with open(os.path.join(d, "metrics.json"), encoding="utf-8") as f:
                    self.results[spec.rollout_id] = json.load(f)
                self.progress(f"{spec.rollout_id}: already done, skipped")
                continue
            todo.append(spec)

        async def one(spec: RolloutSpec) -> None:
            async with gate:
                self.results[spec.rollout_id] = await self._run_one(spec, open_gate)

        try:
            await asyncio.gather(*(one(s) for s in todo))
        finally:
            await asyncio.to_thread(self.writer.close, 30)
            counts = Counter(r.get("status", "error") for r in self.results.values())
            manifest["status"] = "done" if len(self.results) == len(specs) else "interrupted"
            manifest["status_counts"] = dict(counts)
            manifest["ended_utc"] = utc_now()
            manifest["ended_ns"] = self.clock.now_ns()
            manifest["writer"] = {
                "backlog_high_water": self.writer.high_water,
                "errors": self.writer.errors[:20],
            }
            write_json_atomic(manifest_path, manifest)
        return {"run_dir": self.run_dir, "results": self.results, "status_counts": dict(counts)}

    async def _run_one(self, spec: RolloutSpec, open_gate: asyncio.Semaphore) -> dict[str, Any]:
        d = os.path.join(self.run_dir, "rollouts", spec.rollout_id)
        if os.path.isdir(d):  # a failed or partial earlier attempt: keep it beside, redo
            attempt = 1
            while os.path.exists(f"{d}.failed-{attempt}"):
                attempt += 1
            shutil.move(d, f"{d}.failed-{attempt}")
        publish = self.publish_factory(spec.rollout_id) if self.publish_factory else None
        self.progress(f"{spec.rollout_id}: start")
        try:
            transport = spec.make_transport(self.clock, open_gate)
            rec = self.writer.rollout(d, spec.plan.sample_rate)
            session = Session(
                spec.rollout_id,
                transport,
                spec.plan,
                rec,
                self.clock,
                spec.session_config,
                publish,
                spec.meta,
            )
            metrics = await session.run()
        except Exception as exc:  # noqa: BLE001 - one rollout failing never takes down the others
            metrics = {
                "status": "error",
                "reason": f"{type(exc).__name__}: {exc}",
                "rollout_id": spec.rollout_id,
                **spec.meta,
                "responses": [],
            }
            os.makedirs(d, exist_ok=True)
            write_json_atomic(os.path.join(d, "metrics.json"), metrics)
        lat = [
            r["latency_ms"] for r in metrics.get("responses", []) if r.get("latency_ms") is not None
        ]
        self.progress(
            f"{spec.rollout_id}: {metrics['status']}"
            + (f" latency_ms={','.join(f'{x:.0f}' for x in lat)}" if lat else "")
            + (f" ({metrics.get('reason')})" if metrics.get("reason") else "")
        )
        return metrics


def _unique_targets(specs: Sequence[RolloutSpec]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for s in specs:
        if s.target not in seen:
            seen.append(s.target)
    return seen
