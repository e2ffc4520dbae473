"""rig.run_async / rig.run from Python, exactly as docs/api.md shows, against `rig sim`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import rig
from rig.errors import ConfigError
from tests.support.runexit import assert_result_ok, assert_run_ok
from tests.support.simproc import start_sim, stop_sim

LATENCY_MS = 300.0  # the sim's model latency (ground truth)
WAV = str(Path(rig.__file__).parent / "data" / "turn_what.wav")


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    proc, url = start_sim(
        "--latency-ms", str(LATENCY_MS), "--endpoint-silence-ms", "300", "--reply-s", "0.6"
    )
    try:
        yield url
    finally:
        stop_sim(proc)


@pytest.mark.realtime
async def test_run_async_from_an_async_test(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The docs/api.md example: a pytest-asyncio test awaiting a run in its own loop."""
    result = await rig.run_async(
        "builtin:demo", target=sim_url, out=str(tmp_path), run_id="api", concurrency=3,
        headless=True, max_s=30.0, progress_interval_s=1.0,
    )  # fmt: skip
    # headless: a progress line per second of the run (not per chunk), with rate and ETA
    progress = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("progress:")]
    assert 3 <= len(progress) <= 15, progress
    assert progress[0].startswith("progress: 0/3 rollouts done elapsed 1s")
    assert any("rate " in ln and "/min ETA " in ln for ln in progress), progress
    assert_result_ok(result)  # exit 3 only for the rig's own timing on a loaded box
    assert result.run_dir == tmp_path / "api" and result.run_id == "api"
    assert sorted(result.statuses) == ["recipe", "weather", "what"]
    for r in result.rollouts:
        assert r.status == "ok" and r.reason is None
        assert (r.rollout_dir / "metrics.json").is_file()
        assert len(r.responses) == 1 and r.passed is True
        # endpointing (300 ms) + model latency (300 ms) + frames: well under 2 s, over 0.5 s
        (lat,) = r.latencies_ms
        assert 500.0 < lat < 1500.0, lat
        assert r.responses[0]["model_ms"] > 0
    # the manifest records the options the same way `rig run` does
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["config"]["command"] == "run"
    assert manifest["config"]["scenario"] == "builtin:demo"
    assert manifest["config"]["concurrency"] == 3
    assert manifest["config"]["session"]["max_s"] == 30.0
    assert result["what"].rollout_id == "what"
    with pytest.raises(KeyError):
        result["nope"]


@pytest.mark.realtime
def test_blocking_run_and_the_cli_record_one_configuration(sim_url: str, tmp_path: Path) -> None:
    from rig.cli import main

    code = main(["run", WAV, "--target", sim_url, "--out", str(tmp_path),
                 "--run-id", "cli", "--headless", "--max-s", "20"])  # fmt: skip
    result = rig.run(
        WAV, target=sim_url, out=str(tmp_path), run_id="api", headless=True,
        max_s=20.0,
    )  # fmt: skip
    assert_run_ok(code, None, tmp_path / "cli")
    assert_result_ok(result)
    cli = json.loads((tmp_path / "cli" / "manifest.json").read_text())["config"]
    api = json.loads((tmp_path / "api" / "manifest.json").read_text())["config"]
    # one default differs on purpose: rollouts at once as `rig demo` (docs/api.md)
    assert (cli["concurrency"], api["concurrency"]) == (1, 3)
    assert {**cli, "concurrency": 3} == api


async def test_bad_options_are_clear_errors_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown option 'concurency' \(did you mean 'concurrency'"
    ):
        await rig.run_async("builtin:demo", target="ws://127.0.0.1:9", concurency=2)
    with pytest.raises(ConfigError, match=r"concurrency \(--concurrency\)"):
        await rig.run_async("builtin:demo", target="ws://127.0.0.1:9", concurrency="two")
    with pytest.raises(ConfigError, match=r"--concurrency must be an integer in \[1, "):
        await rig.run_async("builtin:demo", target="ws://127.0.0.1:9", concurrency=0)
    with pytest.raises(ConfigError, match=r"transport \(--transport\) must be one of"):
        await rig.run_async("builtin:demo", target="ws://127.0.0.1:9", transport="carrier-pigeon")
    with pytest.raises(ConfigError, match="needs --target URL"):
        await rig.run_async("builtin:demo", out=str(tmp_path))
    with pytest.raises(ConfigError, match=r"rig.run\(\) blocks"):
        rig.run("builtin:demo", target="ws://127.0.0.1:9")
    assert not os.listdir(tmp_path)


@pytest.mark.realtime
async def test_a_new_cli_option_is_an_api_option_otel_after_the_run(
    sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rig run --otel` as `otel=True`: the traces go out after the run, off the loop."""
    pytest.importorskip("opentelemetry.sdk")
    from tests.support.otlp import otlp_receiver, spans_of

    with otlp_receiver() as (endpoint, requests):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        result = await rig.run_async(WAV, target=sim_url, out=str(tmp_path), headless=True,
                                     max_s=20.0, otel=True)  # fmt: skip
    assert_result_ok(result)
    names = sorted(s.name for s in spans_of(requests))
    assert names == sorted(["rig.rollout", "rig.response", "rig.uplink", "rig.model",
                            "rig.downlink", "rig.queue"])  # fmt: skip
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    with pytest.raises(ConfigError, match="needs OTEL_EXPORTER_OTLP_ENDPOINT"):
        await rig.run_async(WAV, target=sim_url, out=str(tmp_path / "x"), otel=True)
    assert "x" not in os.listdir(tmp_path)


@pytest.mark.realtime
async def test_workers_from_python_write_the_run_directory_the_cli_writes(
    sim_url: str, tmp_path: Path
) -> None:
    """`workers=2` from Python: the run goes to two worker processes (the config as JSON on
    their stdin, no command line to re-run) and ends as one run directory, as `rig run
    --workers 2` does."""
    import asyncio

    from rig.cli import main

    opts = ["--concurrency", "2", "--headless", "--max-s", "20", "--progress-interval-s", "0"]
    code = await asyncio.to_thread(
        main, ["run", "builtin:demo", "--target", sim_url, "--out", str(tmp_path),
               "--run-id", "cli", "--workers", "2", *opts]
    )  # fmt: skip
    result = await rig.run_async(
        "builtin:demo", target=sim_url, out=str(tmp_path), run_id="api", workers=2,
        concurrency=2, headless=True, max_s=20.0, progress_interval_s=0.0,
    )  # fmt: skip
    assert_run_ok(code, None, tmp_path / "cli")
    assert_result_ok(result)
    assert sorted(result.statuses) == ["recipe", "weather", "what"]

    def shape(run: str) -> tuple[object, ...]:
        d = tmp_path / run
        manifest = json.loads((d / "manifest.json").read_text())
        files = {
            str(p.relative_to(d)).replace(f"/{run}/", "/") for p in d.rglob("*") if p.is_file()
        }
        return manifest["config"], manifest["workers"]["n"], manifest["status"], files

    cli, api = shape("cli"), shape("api")
    assert cli == api
    assert api[1] == 2 and api[2] == "done"
    assert {"manifest.worker-0.json", "manifest.worker-1.json"} <= api[3]
    for rid in ("recipe", "weather", "what"):
        for name in ("user.wav", "system.wav", "chunks.jsonl", "events.jsonl", "metrics.json"):
            assert f"rollouts/{rid}/{name}" in api[3]
