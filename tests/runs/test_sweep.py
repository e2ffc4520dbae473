"""`rig run --sweep`: settings parsed and checked up front, each a labelled group in one run
directory; at the OpenAI fake a sweep over `silence_duration_ms` on a pause item moves
`detect_ms` and the cut-ins, and `rig report` shows them side by side."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from rig.analysis.aggregate import aggregate
from rig.cli import main
from rig.errors import ConfigError
from rig.runs.sweep import parse_sweep, setting_label, setting_suffix
from rig.scenarios.builtin import data_path
from tests.fakes.openai_server import FakeRealtimeServer
from tests.support.runexit import assert_run_ok, timing_flagged


def test_sweep_values_parse_like_dialect_options_and_multiply() -> None:
    got = parse_sweep(["silence_duration_ms=200,800", "eagerness=low,high"])
    assert got == [
        {"silence_duration_ms": 200, "eagerness": "low"},
        {"silence_duration_ms": 200, "eagerness": "high"},
        {"silence_duration_ms": 800, "eagerness": "low"},
        {"silence_duration_ms": 800, "eagerness": "high"},
    ]
    assert setting_label(got[1]) == "silence_duration_ms=200,eagerness=high"
    assert setting_suffix(got[1]) == "silence_duration_ms-200-eagerness-high"
    assert parse_sweep(None) == []
    for bad in (["x"], ["=1,2"], ["k=1,,2"], ["k=1,1"], ["k=1", "k=2"]):
        with pytest.raises(ConfigError):
            parse_sweep(bad)
    with pytest.raises(ConfigError):
        parse_sweep([f"k{i}=1,2" for i in range(7)])  # 128 settings


def test_a_setting_the_dialect_refuses_fails_before_anything_runs(tmp_path) -> None:
    code = main([
        "run", "rig/data/turn_what.wav", "--target", "ws://127.0.0.1:9/x", "--dialect",
        "openai", "--sweep", "no_such_option=1,2", "--out", str(tmp_path), "--headless",
    ])  # fmt: skip
    assert code == 2 and not any(tmp_path.iterdir())


def _pause_scenario(tmp_path: Path) -> Path:
    a, b = data_path("timing", "pause_a.wav"), data_path("timing", "pause_b.wav")
    path = tmp_path / "pause.toml"
    path.write_text(
        f"""
[suite]
name = "sweep"
[defaults]
pad_before_s = 0.5
drain_quiet_s = 3.5
[[items]]
id = "pause"
kind = "pause"
steps = [
  {{ type = "turn", files = ["{a}", "{b}"], gap_s = 2.0, label = "split" }},
  {{ type = "drain" }},
]
"""
    )
    return path


@pytest.mark.realtime
def test_sweep_at_the_openai_fake_compares_settings_side_by_side(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("COLUMNS", "220")
    ready = threading.Event()
    holder: dict = {}

    def serve() -> None:
        async def go() -> None:
            async with FakeRealtimeServer(reply_s=1.5, model_delay_s=0.1) as server:
                holder["s"], holder["stop"] = server, asyncio.Event()
                holder["loop"] = asyncio.get_running_loop()
                ready.set()
                await holder["stop"].wait()

        asyncio.run(go())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        for attempt in range(3):  # a rollout flagged for the rig's own timing has no components
            run = tmp_path / f"sw{attempt}"
            code = main([
                "run", str(_pause_scenario(tmp_path)), "--target", holder["s"].url, "--dialect",
                "openai", "--sweep", "silence_duration_ms=2500,300", "--concurrency", "2",
                "--out", str(tmp_path), "--run-id", run.name, "--headless",
            ])  # fmt: skip
            assert_run_ok(code, None, run)
            if not timing_flagged(run):
                break
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        t.join(10)
    assert not timing_flagged(run), "the rig's own timing failed in 3 runs in a row"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["sweep"] == [
        {"silence_duration_ms": 2500},
        {"silence_duration_ms": 300},
    ]
    names = sorted(p.name for p in (run / "rollouts").iterdir())
    assert names == ["pause.silence_duration_ms-2500", "pause.silence_duration_ms-300"]
    rep = aggregate(run)
    by = {g["setting"]: g for g in rep["settings"]}
    assert [g["setting"] for g in rep["settings"]] == [
        "silence_duration_ms=300",
        "silence_duration_ms=2500",
    ]  # numbers in order
    short, long_ = by["silence_duration_ms=300"], by["silence_duration_ms=2500"]
    # 300 ms of silence ends the turn inside the 2 s pause: the fake cuts in there
    assert short["turn_taking"]["pause_cut_ins"] >= 1, short
    assert long_["turn_taking"]["pause_cut_ins"] == 0, long_
    assert long_["pass"]["passed"] == 1 and short["pass"]["passed"] == 0
    d_short = short["components"]["detect_ms"]["median"]
    d_long = long_["components"]["detect_ms"]["median"]
    assert 2500 - 25 - 50 <= d_long <= 2500 + 60 and 300 - 25 - 50 <= d_short <= 300 + 60
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["report", str(run), "--no-rollouts"]) == 0
    out = buf.getvalue()
    assert "settings side by side" in out and "silence_duration_ms=300" in out
