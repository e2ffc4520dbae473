"""`rig.run_async` / `rig.run`: `rig run` from Python, with the same defaults and checks.

Both build the RunConfig `rig run SCENARIO --option ...` would (rig.api.options) and run it
through the library's one path (rig.runs.launch: prepare, then this process, `workers=N`
processes or an engine), exactly as the command does: the manifest, the run directory and
every check are the same; only the exit code becomes a `RunResult`. `run_async` runs in the
caller's event loop (an async test); `run` starts one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rig.api.options import config
from rig.api.result import RunResult
from rig.errors import ConfigError
from rig.runs import launch
from rig.runs.eventloop import run_on


async def run_async(
    scenario: str,
    *,
    target: str | None = None,
    transport: str = "ws",
    dialect: str = "rig",
    **options: Any,
) -> RunResult:
    """Play `scenario` into the system at `target` and record it; returns when every rollout
    has finished and its metrics are written.

    `options` are `rig run`'s options by their long names with `_` for `-` (`concurrency=3`,
    `max_s=30.0`, `out="recordings"`, `run_id=...`, `dialect_options={"model": ...}`);
    an unknown option or a bad value raises `rig.errors.ConfigError`, as the CLI exits 2.
    `workers=N` shards the run over N processes and `engine="ray"` over a Ray cluster, as
    on the command line (each gets the config as JSON). Rollouts that fail do not raise:
    they are in the result with their status and reason.
    """
    cfg = config(scenario, {"target": target, "transport": transport, "dialect": dialect,
                            **options})  # fmt: skip
    outcome = await launch.run_async(cfg)
    return await asyncio.to_thread(RunResult.from_dir, outcome.run_dir, outcome.stop_reason)


def run(
    scenario: str,
    *,
    target: str | None = None,
    transport: str = "ws",
    dialect: str = "rig",
    **options: Any,
) -> RunResult:
    """Blocking `run_async` (starts its own event loop: not from inside a running one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigError("rig.run() blocks: inside an event loop, `await rig.run_async(...)`")
    return run_on(
        str(options.get("loop", "asyncio")),
        run_async(scenario, target=target, transport=transport, dialect=dialect, **options),
    )
