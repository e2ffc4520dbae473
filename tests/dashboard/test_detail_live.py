"""The detail panel is alive while a rollout runs: `rig run` on a pseudo-terminal, frames
read as they are drawn. Speech shows while each side talks, the activity strips fill, and
the response's latency shows before the rollout ends (not only once it is over)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from rig.scenarios import data_path
from tests.support.ptyterm import Pty
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime


def _running(screen: str) -> bool:
    return "all done" not in screen and "rig run: " not in screen


async def test_speech_strips_and_latency_update_while_the_rollout_runs(tmp_path) -> None:
    sim, url = start_sim("--reply-s", "2.5")
    term = Pty(140, 45)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rig", "run", str(data_path("turn_what.wav")), "--target", url,
            "--drain-quiet-s", "3", "--out", str(tmp_path), "--run-id", "live",
            stdin=term.slave, stdout=term.slave, stderr=term.slave,
        )  # fmt: skip
        screen = await term.wait_for("user SPEAKING", 20)
        assert _running(screen)
        screen = await term.wait_for("system SPEAKING", 20)
        assert _running(screen), "system speech only shown after the rollout"
        screen = await term.wait_for(" ms (playback, n=1) · split after the stream", 10)
        assert _running(screen), "the response only shown after the rollout"
        strips = [line for line in screen.splitlines() if "-30s" in line]  # every frame so far
        assert any("█" in line for line in strips), strips  # the history is not all dots
        final = await term.wait_for("all done", 40)
        assert await asyncio.wait_for(proc.wait(), 30) == 0, term.read()
    finally:
        stop_sim(sim)
        term.close()
    assert "Traceback" not in final
