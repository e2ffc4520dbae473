"""bench/readpath.py: a received message's CPU by read path, every path really receiving
(a real paced server in its own process, real rig connections on each loop)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.realtime
@pytest.mark.skipif(not importlib.util.find_spec("uvloop"), reason="uvloop not installed")
def test_every_read_path_receives_and_is_costed() -> None:
    r = subprocess.run(
        [sys.executable, str(BENCH / "readpath.py"), "--streams", "4", "--seconds", "0.5"]
        + ["--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = re.findall(r"^\| (.+?) \| ([0-9.]+) \| ([0-9.]+)-([0-9.]+) \|$", r.stdout, re.M)
    assert [name for name, *_ in rows] == [
        "uvloop, libuv reads",
        "uvloop, own reads + kernel",
        "asyncio + kernel",
    ], r.stdout
    assert all(0 < float(us) < 2000 for _, us, _, _ in rows), r.stdout
    assert "load average" in r.stdout
