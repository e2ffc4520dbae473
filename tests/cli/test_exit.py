"""Exit status and one-line errors of the command line (docs/install.md, "Exit status")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rig.cli import EXIT_FAILED, EXIT_USAGE


def rig(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", *args], capture_output=True, text=True, timeout=timeout
    )


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[0]


def test_usage_errors_exit_2() -> None:
    r = rig()
    assert r.returncode == EXIT_USAGE and "usage: rig" in r.stdout
    r = rig("report", "some-dir", "--no-such-flag")
    assert r.returncode == EXIT_USAGE and "unrecognized arguments" in r.stderr
    r = rig("watch")  # no broker given
    assert r.returncode == EXIT_USAGE
    assert "needs --mqtt URL" in one_line(r)


def test_report_of_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    r = rig("report", str(tmp_path / "nope"))
    assert r.returncode == EXIT_USAGE and "not a run directory" in one_line(r)


def test_watch_does_not_exit_0_when_its_subscriber_dies() -> None:
    """The subscriber retries broker errors; anything else that stops it (here a TLS cafile
    that does not exist) ends `rig watch` with an error, not a silent clean exit."""
    pytest.importorskip("aiomqtt")
    r = rig("watch", "--mqtt", "mqtts://127.0.0.1:9?cafile=/nonexistent/ca.pem", "--headless",
            "--duration", "20")  # fmt: skip
    assert r.returncode == EXIT_FAILED, r.stdout + r.stderr
    assert "MQTT subscriber stopped: FileNotFoundError" in one_line(r)
