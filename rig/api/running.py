"""`rig.run_async` / `rig.run`: `rig run` from Python, with the same defaults and checks.

Both build the namespace `rig run SCENARIO --option ...` would parse (rig.api.options) and
run it through the CLI's own path (`rig.cli.run.prepare`, then the runner): the manifest,
the run directory and every check are the command's; only the exit code becomes a
`RunResult`. `run_async` runs in the caller's event loop (an async test); `run` starts one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rig.api.options import namespace
from rig.api.result import RunResult
from rig.cli import run as run_cmd
from rig.errors import ConfigError


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
    Rollouts that fail do not raise: they are in the result with their status and reason.
    """
    args = namespace(scenario, {"target": target, "transport": transport, "dialect": dialect,
                                **options})  # fmt: skip
    runner = await run_cmd.run_async(args)
    return await asyncio.to_thread(RunResult.from_dir, runner.run_dir, runner.stop_reason)


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
    return asyncio.run(
        run_async(scenario, target=target, transport=transport, dialect=dialect, **options)
    )
