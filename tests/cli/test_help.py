"""`--help` tells a newcomer what rig is, with examples; every option says what it does and
its default; `rig sim` says how it is scheduled in words; Ctrl-C of a run says how to
resume it."""

from __future__ import annotations

import argparse
import signal
import subprocess
import time

import pytest

from rig.cli import build_parser
from tests.support.cli import rig, rig_argv
from tests.support.simproc import start_sim, stop_sim


def test_top_help_says_what_rig_is_with_examples() -> None:
    r = rig("--help")
    assert r.returncode == 0
    assert "the command line." not in r.stdout
    assert "a real-time audio test rig for voice AI" in r.stdout
    assert "examples:" in r.stdout and "rig demo" in r.stdout
    assert "rig run rig/data/turn_what.wav --target ws://127.0.0.1:8765" in r.stdout
    sub = rig("report", "--help")
    assert "\nrig report: summary across the rollouts of a run" in sub.stdout  # what it is


def _options() -> list[tuple[str, argparse.Action]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [
        (name, a)
        for name, command in sub.choices.items()
        for a in command._actions
        if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
    ]


def test_every_option_has_help_and_shows_its_default() -> None:
    missing = [f"rig {n} {a.option_strings or a.dest}" for n, a in _options() if not a.help]
    assert missing == []
    r = rig("sim", "--help")
    text = " ".join(r.stdout.split())
    assert "--host HOST address to listen on (default: 127.0.0.1)" in text
    assert "--port PORT port to listen on (0: a free one) (default: 8765)" in text
    assert "--sample-rate SAMPLE_RATE rate the system speaks and hears, Hz (default: 16000)" in text
    r = rig("watch", "--help")
    assert "(default: 10.0)" in r.stdout  # --summary-every
    r = rig("calibrate", "--help")
    assert "(default: 5)" in " ".join(r.stdout.split())  # --repeats


def test_sim_says_its_scheduling_in_words() -> None:
    proc, _ = start_sim()
    try:
        time.sleep(0.5)
    finally:
        stop_sim(proc)
    assert proc.stdout is not None
    out = proc.stdout.read()
    line = next(x for x in out.splitlines() if x.startswith("rig sim: ") and "stopped" not in x)
    assert "{" not in line and "'policy'" not in line
    assert "scheduling" in line or "priority" in line


@pytest.mark.realtime
def test_ctrl_c_of_a_run_says_how_to_resume(tmp_path) -> None:
    sim, url = start_sim()
    try:
        proc = subprocess.Popen(
            [*rig_argv(), "run", "builtin:demo", "--target", url, "--headless", "--out",
             str(tmp_path), "--run-id", "cut", "--concurrency", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        for line in proc.stderr:  # the first rollout is streaming
            if line.strip().endswith(": start"):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        stop_sim(sim)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == (
        f"rig run: interrupted; finished rollouts are kept in {tmp_path / 'cut'}: run the "
        "same command with --run-id cut to do the rest"
    )
