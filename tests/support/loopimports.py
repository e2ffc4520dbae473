"""Run by tests/test_loop_imports.py in a fresh interpreter: a real run (three rollouts of
different lengths against `rig sim`, so the first ends while the others stream) with an
audit hook that records every module imported on the loop's thread from the moment the
first rollout streams until the run stops streaming.
Prints one JSON line: {"imports": [...], "statuses": {...}}."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from rig import realtime
from rig.audio.source import tone
from rig.core.plan import PlanBuilder
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.session import Session, SessionConfig

STREAMING = threading.Event()
LOOP_TID: list[int] = []
SEEN: list[str] = []


def hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "import" or not (STREAMING.is_set() and FIRST_STREAM.is_set()):
        return
    if threading.get_native_id() in LOOP_TID:
        SEEN.append(str(args[0]))


class Marked:
    """realtime.streaming(), with the window marked for the hook."""

    def __init__(self) -> None:
        self.cm = ORIGINAL()

    def __enter__(self) -> None:
        self.cm.__enter__()
        STREAMING.set()

    def __exit__(self, *exc: object) -> None:
        STREAMING.clear()
        self.cm.__exit__(*exc)


ORIGINAL = realtime.streaming
SEND_LOOP = Session._send_loop


async def send_loop(self: Session, *args: Any) -> Any:
    """The first stream has started: from here on, an import on the loop stalls a stream."""
    FIRST_STREAM.set()
    return await SEND_LOOP(self, *args)


FIRST_STREAM = threading.Event()


async def main(url: str, out: str) -> dict[str, str]:
    LOOP_TID.append(threading.get_native_id())
    specs = []
    for i, seconds in enumerate((0.4, 1.2, 1.2)):
        plan = PlanBuilder(16_000).add_silence(0.1).add_turn(tone(300, seconds, 16_000), "t")
        specs.append(
            RolloutSpec(
                f"r{i}",
                plan.build(),
                ws_factory(url, "rig", 16_000, {}),
                {"url": url},
                {},
                SessionConfig(drain_quiet_s=1.0, max_s=20),
            )  # fmt: skip
        )
    runner = Runner(out, RunnerSettings(run_id="r", concurrency=3, start_interval_s=0.0))
    result = await runner.run(specs)
    return {rid: m["status"] for rid, m in result["results"].items()}


if __name__ == "__main__":
    realtime.streaming = Marked  # type: ignore[assignment]
    Session._send_loop = send_loop  # type: ignore[method-assign]
    sys.addaudithook(hook)
    statuses = asyncio.run(main(sys.argv[1], sys.argv[2]))
    print(json.dumps({"imports": sorted(set(SEEN)), "statuses": statuses}))
