"""Ids, files and options from outside (issue #15 row 13): ids are single safe path parts,
every reader tolerates a bad file with a message naming it, numeric options are
range-checked, and `Runner(analyze=False)` keeps the real finishing error."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from rig.analysis.aggregate import aggregate
from rig.analysis.rollout import load_rollout, read_jsonl, read_track
from rig.cli import EXIT_USAGE, main
from rig.core.plan import PlanBuilder
from rig.errors import AudioInputError, ConfigError, ScenarioError
from rig.ids import check_id, safe_id
from rig.reporting.summary import load_rollouts, summary_table
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings, rollout_done
from rig.scenarios.fileformat import build_items


@pytest.mark.parametrize(
    "bad", ["../../x", "a/b", "a\\b", "a\n", "\na", "..", ".hidden", "", "a" * 200, "a\0b"]
)
def test_ids_are_single_safe_path_parts(bad: str) -> None:
    with pytest.raises(ConfigError):
        check_id(bad, "--run-id")


def test_good_ids_pass_and_wav_stems_are_made_safe() -> None:
    for good in ("run1", "20250101-120000-abcdef", "q1.r0", "item_3-r2"):
        assert check_id(good, "id") == good
    assert safe_id("my turn (2)") == "my_turn__2_"
    assert safe_id("..") == "x.."
    check_id(safe_id("a\n/../b"), "id")


def test_runner_refuses_unsafe_run_and_rollout_ids(tmp_path) -> None:
    with pytest.raises(ConfigError, match="run-id"):
        Runner(str(tmp_path), RunnerSettings(run_id="../../escape"))
    plan = PlanBuilder(16_000).add_silence(0.1).build()
    spec = RolloutSpec("../up", plan, lambda c, g: None, {}, {})  # type: ignore[arg-type,return-value]
    import asyncio

    with pytest.raises(ConfigError, match="rollout id"):
        asyncio.run(Runner(str(tmp_path), RunnerSettings(run_id="ok")).run([spec]))
    assert not (tmp_path / "up").exists() and not (tmp_path / "ok" / "up").exists()


def test_cli_run_id_with_a_path_is_refused(tmp_path) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(
            ["run", "rig/data/turn_what.wav", "--target", "ws://127.0.0.1:9",
             "--out", str(tmp_path / "out"), "--run-id", "../../x", "--headless"]
        )  # fmt: skip
    assert code == EXIT_USAGE and "--run-id" in err.getvalue()
    assert not (tmp_path / "x").exists()


def test_scenario_item_id_with_a_trailing_newline_is_refused(tmp_path) -> None:
    doc = {"items": [{"id": "a\n", "steps": [{"type": "pause", "seconds": 1}]}]}
    with pytest.raises(ScenarioError, match=r"items\[0\]\.id"):
        build_items(doc, str(tmp_path / "s.toml"), 16_000)


@pytest.mark.parametrize(
    "field,value",
    [("gap_s", 1e12), ("pad_before_s", 1e9), ("seconds", 1e12), ("max_s", 1e300)],
)
def test_scenario_durations_are_range_checked(tmp_path, field: str, value: float) -> None:
    wav = "rig/data/turn_what.wav"
    step: dict[str, object]
    if field == "gap_s":
        step = {"type": "turn", "files": [wav, wav], "gap_s": value}
    elif field == "seconds":
        step = {"type": "pause", "seconds": value}
    elif field == "max_s":
        step = {"type": "drain", "max_s": value}
    else:
        step = {"type": "turn", "file": wav, field: value}
    doc = {"items": [{"id": "a", "steps": [step]}]}
    with pytest.raises(ScenarioError, match=field):
        build_items(doc, str(Path.cwd() / "s.toml"), 16_000)


# -- bad files ---------------------------------------------------------------------------------


BAD_METRICS = ["[]", "null", "5", '"x"', "{", '{"status": 5, "responses": 5, "uplink": "x"}',
               '{"responses": [1, "a", {"latency_ms": "x"}], "uplink": {"lateness_ms": []}}',
               '{"status": "ok", "reason": NaN}', "[" * 100_000]  # fmt: skip


def _run_with(tmp_path: Path, metrics_texts: list[str]) -> Path:
    run = tmp_path / "run"
    for i, text in enumerate(metrics_texts):
        d = run / "rollouts" / f"r{i}"
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(text)
    (run / "manifest.json").write_text("[]")
    return run


def test_report_and_summary_survive_bad_metrics_files(tmp_path) -> None:
    run = _run_with(tmp_path, BAD_METRICS)
    rollouts = load_rollouts(str(run))
    assert len(rollouts) == len(BAD_METRICS)
    unreadable = [m for m in rollouts if m.get("status") == "unreadable"]
    assert len(unreadable) == 7  # not an object, not JSON, NaN, nested 100k deep
    assert all("metrics.json" in m["reason"] for m in unreadable)
    summary_table(rollouts)  # renders
    report = aggregate(run)
    assert report["n_rollouts"] == len(BAD_METRICS)
    for args in (["report", str(run)], ["report", str(run), "--json"]):
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(args) == 0
    json.loads(out.getvalue())  # strict JSON out, even from a NaN in a file
    for i in range(len(BAD_METRICS)):
        assert rollout_done(str(run / "rollouts" / f"r{i}")) is False


def _wav(path: Path, *, channels: int = 1, rate: int = 16_000, fmt_size: int = 16) -> Path:
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2, 2, 16)[:fmt_size]
    data = np.arange(64, dtype="<i2").tobytes()
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


@pytest.mark.parametrize(
    "kw", [{"channels": 0}, {"fmt_size": 8}, {"rate": 0}, {"channels": 70000 & 0xFFFF}]
)
def test_read_track_refuses_broken_headers_naming_the_file(tmp_path, kw: dict[str, int]) -> None:
    p = _wav(tmp_path / "user.wav", **kw)
    with pytest.raises(AudioInputError, match="user.wav"):
        read_track(p)


def test_read_track_reads_a_good_one(tmp_path) -> None:
    x, rate = read_track(_wav(tmp_path / "user.wav"))
    assert rate == 16_000 and x.size == 64


def test_load_rollout_and_jsonl_tolerate_garbage(tmp_path) -> None:
    d = tmp_path / "r"
    d.mkdir()
    _wav(d / "user.wav")
    (d / "metrics.json").write_text('{"sample_rate": "fast", "t0_ns": "x", "responses": 3}')
    (d / "events.jsonl").write_text('{"kind":"a","t_ns":1}\n' + "[" * 100_000 + "\n{torn")
    assert [e["kind"] for e in read_jsonl(d / "events.jsonl")] == ["a"]
    view = load_rollout(d)
    assert view.sample_rate == 16_000


# -- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "opt",
    [
        ["--sample-rate", "0"],
        ["--sample-rate", "20000000"],
        ["--concurrency", "0"],
        ["--repeat", "0"],
        ["--max-s", "0"],
        ["--max-s", "1e300"],
        ["--drain-quiet-s", "-1"],
        ["--frame-ms", "0"],
        ["--frame-ms", "nan"],
        ["--probe-interval-s", "-0.5"],
        ["--connect-concurrency", "0"],
        ["--rt-priority", "100"],
    ],
)
def test_numeric_run_options_are_range_checked(tmp_path, opt: list[str]) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(
            ["run", "rig/data/turn_what.wav", "--target", "ws://127.0.0.1:9",
             "--out", str(tmp_path), "--headless", *opt]
        )  # fmt: skip
    assert code == EXIT_USAGE, err.getvalue()
    assert opt[0] in err.getvalue()
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_runner_without_analysis_keeps_the_real_finishing_error(tmp_path) -> None:
    # a fresh interpreter: nothing has imported concurrent.futures.process yet
    script = textwrap.dedent(
        f"""
        import asyncio, json
        from rig.core.plan import PlanBuilder
        from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
        from rig.dialects.rawpcm import RawPcmDialect
        from rig.transports.websocket import WebSocketTransport

        def make(clock, gate):
            return WebSocketTransport("ws://127.0.0.1:9", RawPcmDialect(16000), clock, retries=0)

        plan = PlanBuilder(16000).add_silence(0.1).build()
        spec = RolloutSpec("r", plan, make, {{}}, {{}})
        settings = RunnerSettings(run_id="a", analyze=False, analysis_timeout_s=1e-9)
        runner = Runner({str(tmp_path)!r}, settings)
        out = asyncio.run(runner.run([spec]))
        print(json.dumps(out["results"]["r"]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    assert m["status"] == "transport_error", m
    assert "AttributeError" not in json.dumps(m)
    assert "TimeoutError" in m["timing"]["error"]


@pytest.mark.parametrize("kind", [{}, [], 5, None])
def test_scenario_step_type_of_any_shape_is_a_scenario_error(tmp_path, kind: object) -> None:
    # found by bench/fuzz.py: an unhashable step type raised TypeError
    doc = {"items": [{"id": "a", "steps": [{"type": kind, "seconds": 0.1}]}]}
    with pytest.raises(ScenarioError, match=r"steps\[0\]\.type"):
        build_items(doc, str(tmp_path / "s.toml"), 16_000)
