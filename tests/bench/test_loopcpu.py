"""bench/loopcpu.py's wrappers count a piece's calls and CPU only inside the window, and every
named piece is a real method (a rename in rig would otherwise leave the bench measuring
nothing)."""

import argparse
import importlib
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import loopcpu  # noqa: E402


def test_every_piece_names_a_method_of_rig() -> None:
    for name, (module, cls, attr) in (loopcpu.PIECES | loopcpu.SIM_PIECES).items():
        owner = getattr(importlib.import_module(module), cls)
        assert callable(getattr(owner, attr)), name


def test_a_wrapped_method_is_timed_only_while_on_and_keeps_its_result() -> None:
    class Work:
        def spin(self, ms: float) -> str:
            end = time.thread_time_ns() + int(ms * 1e6)
            while time.thread_time_ns() < end:
                pass
            return "done"

    pieces = loopcpu.Pieces()
    pieces.wrap(Work, "spin", "spin")
    w = Work()
    assert w.spin(1) == "done" and "spin" not in pieces.acc  # off: not counted
    pieces.on = True
    assert w.spin(2) == "done" and w.spin(2) == "done"
    pieces.on = False
    ns, calls = pieces.acc["spin"]
    assert calls == 2 and 4e6 <= ns < 4e6 + 50e6
    assert pieces.wrapper_us() > 0 and "_cal" not in pieces.acc


def test_the_sim_side_counts_its_frames_from_the_engine_s_chunks(capsys) -> None:
    assert not set(loopcpu.PIECES) & set(loopcpu.SIM_PIECES)  # a name means one method
    args = argparse.Namespace(side="sim", n=100, loop="uvloop")
    res = {"wall_ns": 2_000_000_000, "loop_ns": 1_000_000_000, "load": (0.5, 0.5, 0.5),
           "acc": {"onaudio": [4_000_000, 8000], "direct": [6_000_000, 9000]}}  # fmt: skip
    loopcpu.report(args, res, 1.0, (0.4, 0.4, 0.4))
    out = capsys.readouterr().out
    assert "8000 uplink frames" in out and "125.0 us/frame" in out  # 1 s of CPU / 8000
    assert "| direct | 4500 | 0.75 | 0.67 |" in out


def test_a_scenario_replaces_the_tone_turn_and_keeps_its_own_drains() -> None:
    tone = argparse.Namespace(n=50, port=8799, rt_priority=3, loop="uvloop", seconds=20.0)
    argv = loopcpu.run_argv(tone, "/tmp/tone.wav", "/tmp/out")
    assert argv[1] == "/tmp/tone.wav" and argv[argv.index("--repeat") + 1] == "50"
    assert argv[argv.index("--max-s") + 1] == "50.0" and "--drain-quiet-s" in argv
    timing = argparse.Namespace(**vars(tone), scenario="builtin:timing", repeat=40)
    argv = loopcpu.run_argv(timing, "builtin:timing", "/tmp/out")
    assert argv[1] == "builtin:timing" and argv[argv.index("--repeat") + 1] == "40"
    assert argv[argv.index("--concurrency") + 1] == "50"
    assert "--max-s" not in argv and "--drain-quiet-s" not in argv  # the scenario's own


def test_a_scenario_needs_the_piece_that_counts_its_frames(monkeypatch, capsys) -> None:
    argv = ["loopcpu.py", "--side", "sim", "--scenario", "builtin:timing", "--pieces", "direct"]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        loopcpu.main()
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("main() ran without the counting piece")
    assert "counts the frames by `onaudio`" in capsys.readouterr().err
