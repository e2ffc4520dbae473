import json
import subprocess
import sys

import pytest

from rig.recordings.manifest import redact, redact_argv
from tests.support.runexit import assert_run_ok


def rig(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.realtime
def test_demo_headless_writes_the_run_directory_contract(tmp_path) -> None:
    r = rig("demo", "--headless", "--out", str(tmp_path), "--run-id", "demo")
    assert_run_ok(r.returncode, r.stderr + r.stdout, tmp_path / "demo")
    run = tmp_path / "demo"
    manifest = json.loads((run / "manifest.json").read_text())
    for key in (
        "rig_version",
        "git_sha",
        "python",
        "libraries",
        "host",
        "seed",
        "started_utc",
        "ended_utc",
        "config",
        "status_counts",
    ):
        assert key in manifest
    assert manifest["status_counts"] == {"ok": 3}
    assert manifest["config"]["sim"]["latency_ms"] == 400.0
    for rid in ("what", "weather", "recipe"):
        d = run / "rollouts" / rid
        for f in ("user.wav", "system.wav", "chunks.jsonl", "events.jsonl", "metrics.json"):
            assert (d / f).exists(), f
        m = json.loads((d / "metrics.json").read_text())
        (resp,) = m["responses"]
        assert 850 < resp["latency_ms"] < 960  # 500 ms endpointing + 400 ms model, on loopback
    assert "latency" in r.stdout and "what" in r.stdout
    rep = rig("report", str(run), "--json")
    assert rep.returncode == 0
    assert len(json.loads(rep.stdout)["rollouts"]) == 3


def test_missing_scenario_file_is_a_clear_error(tmp_path) -> None:
    r = rig(
        "run", str(tmp_path / "nope.wav"), "--target", "ws://127.0.0.1:9", "--out", str(tmp_path)
    )
    assert r.returncode == 2  # bad input: a usage error
    assert "nope.wav" in r.stderr and "no such file" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_dialect_and_builtin_are_clear_errors(tmp_path) -> None:
    r = rig("run", "builtin:nosuch", "--target", "ws://127.0.0.1:9", "--out", str(tmp_path))
    assert r.returncode == 2 and "no built-in suite" in r.stderr
    r = rig("run", "x.wav", "--target", "ws://x", "--dialect", "klingon", "--out", str(tmp_path))
    assert r.returncode == 2 and "unknown dialect" in r.stderr


def test_secrets_are_redacted() -> None:
    cfg = {
        "api_key": "sk-123",
        "url": "wss://user:pw@host/path?token=abc",
        "nested": [{"Authorization": "Bearer x"}],
    }
    red = json.dumps(redact(cfg))
    assert "sk-123" not in red and "pw" not in red and "abc" not in red and "Bearer" not in red
    assert "host/path" in red
    argv = redact_argv(
        ["rig", "run", "--api-key", "sk-1", "--token=abc", "--target", "ws://a:b@h/"]
    )
    assert "sk-1" not in argv and "--token=abc" not in argv and "ws://h/" in argv
