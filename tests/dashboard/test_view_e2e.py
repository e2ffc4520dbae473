"""`rig run` on a terminal, end to end: the view draws in its own process, the process that
streams never loads or calls the renderer, `q` closes the view and the run goes on."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ptyterm import Pty
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime
REPO = Path(__file__).resolve().parents[2]
WAV = str(REPO / "rig" / "data" / "turn_what.wav")


async def test_the_streaming_process_never_imports_or_calls_the_renderer(tmp_path: Path) -> None:
    sim, url = start_sim()
    term = Pty(140, 45)
    report = tmp_path / "audit.json"
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "tests" / "support" / "audited_run.py"),  # a script: installed rig too
            str(report),
            "rig",
            "run",
            WAV,
            "--target",
            url,
            "--repeat",
            "2",
            "--concurrency",
            "2",
            "--drain-quiet-s",
            "0.8",
            "--out",
            str(tmp_path / "out"),
            "--run-id",
            "audit",
            cwd=REPO,
            stdin=term.slave,
            stdout=term.slave,
            stderr=term.slave,
        )
        await term.wait_for("rig · audit", 20)  # the view is up, on the terminal
        screen = await term.wait_for("all done", 40)  # its final frame
        assert await asyncio.wait_for(proc.wait(), 30) == 0, term.read()
    finally:
        stop_sim(sim)
        term.close()
    assert "Traceback" not in screen
    audit = json.loads(report.read_text())
    assert audit["exit"] == 0
    viewers = [a for a in audit["subprocesses"] if "rig.dashboard.viewer" in a]
    assert len(viewers) == 1, audit["subprocesses"]  # the view ran, in its own process
    imported = {name: when for name, when in audit["imports"]}
    assert not [m for m in imported if m.startswith("rig.dashboard")], imported
    assert "rich.live" not in imported
    assert [m for m, when in imported.items() if when == "streaming"] == []
    assert audit["renders_streaming"] == 0
    for rid in ("turn_what-r0", "turn_what-r1"):
        metrics = json.loads(
            (tmp_path / "out" / "audit" / "rollouts" / rid / "metrics.json").read_text()
        )
        assert metrics["status"] == "ok"


TMUX = ["tmux", "-L", f"rigview{os.getpid()}", "-f", "/dev/null"]  # a private server


def _tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False).stdout


async def tmux(*args: str) -> str:
    return await asyncio.to_thread(_tmux, *args)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
async def test_rig_run_view_in_tmux_appears_updates_and_q_leaves_the_run_going(
    tmp_path: Path,
) -> None:
    sim, url = start_sim()
    session = f"rigrunview{os.getpid()}"
    done = tmp_path / "exit"
    out = tmp_path / "out"
    cmd = (
        f"cd {REPO} && {sys.executable} -m rig run {WAV} --target {url} --repeat 2 "
        f"--concurrency 1 --drain-quiet-s 0.8 --out {out} --run-id tm; echo $? > {done}; "
        "sleep 30"
    )
    await tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "45", cmd)

    async def screen_with(text: str, timeout_s: float = 20.0) -> str:
        screen = ""
        for _ in range(int(timeout_s * 10)):
            screen = await tmux("capture-pane", "-p", "-t", session)
            if text in screen:
                return screen
            await asyncio.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared:\n{screen}")

    def row(screen: str, rid: str) -> str:
        rows = [ln for ln in screen.splitlines() if ln[2:].startswith(rid + " ")]
        assert rows, screen
        return rows[0]

    try:
        first = await screen_with("turn_what-r0")
        assert "rig · tm · 0/2 done" in first and "127.0.0.1:" in first
        await screen_with("running")
        # the view updates: the running rollout's row changes from one refresh to the next
        before = row(await screen_with("running"), "turn_what-r0")
        for _ in range(50):
            await asyncio.sleep(0.2)
            if row(await tmux("capture-pane", "-p", "-t", session), "turn_what-r0") != before:
                break
        else:
            raise AssertionError(f"the view did not update: {before}")
        await tmux("send-keys", "-t", session, "q")
        after = await screen_with("live view closed; the run goes on")
        assert "Traceback" not in after
        for _ in range(200):
            if await asyncio.to_thread(done.exists):
                break
            await asyncio.sleep(0.2)
        final = await tmux("capture-pane", "-p", "-S", "-100", "-t", session)
        assert done.read_text().strip() == "0", final
        assert "turn_what-r1: ok" in final  # plain progress lines after the view closed
        for rid in ("turn_what-r0", "turn_what-r1"):
            m = json.loads((out / "tm" / "rollouts" / rid / "metrics.json").read_text())
            assert m["status"] == "ok"
    finally:
        await tmux("kill-server")
        stop_sim(sim)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
async def test_rig_run_in_tmux_ctrl_c_stops_run_and_view_cleanly(tmp_path: Path) -> None:
    sim, url = start_sim()
    session = f"rigrunint{os.getpid()}"
    done = tmp_path / "exit"
    out = tmp_path / "out"
    cmd = (
        f"cd {REPO} && {sys.executable} -m rig run {WAV} --target {url} --out {out} --run-id ci; "
        f"echo $? > {done}; stty -a | grep -o -- '-\\?icanon' >> {done}; sleep 30"
    )
    await tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "45", cmd)
    try:
        for _ in range(200):  # the rollout's row says it streams
            screen = await tmux("capture-pane", "-p", "-t", session)
            if any(
                ln.startswith("▶ turn_what ") and " running " in ln for ln in screen.split("\n")
            ):
                break
            await asyncio.sleep(0.1)
        await tmux("send-keys", "-t", session, "C-c")
        for _ in range(200):
            if await asyncio.to_thread(done.exists) and len(done.read_text().split()) >= 2:
                break
            await asyncio.sleep(0.1)
        screen = await tmux("capture-pane", "-p", "-S", "-100", "-t", session)
        code, icanon = done.read_text().split()[:2]
        assert code == "130", screen
        assert icanon == "icanon"  # the view gave the terminal back in canonical mode
        assert "the run goes on" not in screen  # it is stopping: nothing to announce
        # (the analysis worker prints a KeyboardInterrupt traceback of its own, as headless)
        assert "rig/dashboard" not in screen and "rig/telemetry" not in screen, screen
        manifest = json.loads((out / "ci" / "manifest.json").read_text())
        assert manifest["status"] == "interrupted"
    finally:
        await tmux("kill-server")
        stop_sim(sim)
