"""Nothing is imported on the audio loop while it streams.

A module imported for the first time mid-run runs on the loop thread (finding it, reading
it from disk, executing it) while every other stream waits: numpy 2.4 imports `numpy.ma`
(15-22 ms measured here) on the first `np.percentile`, which the first rollout to end called
in its metrics, on the loop, while the others still streamed: CI's "one ~30 ms loop lag when
the first rollout ends". Run in a fresh interpreter (as CI's first run in a pytest process
is), with an audit hook on the loop's thread; tests/support/loopimports.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime


def test_no_module_is_imported_on_the_loop_while_it_streams(tmp_path) -> None:
    sim, url = start_sim("--reply-s", "0.2", "--latency-ms", "50", "--endpoint-silence-ms", "200")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.support.loopimports", url, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop_sim(sim)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got["statuses"].values()) == {"ok"}, got
    assert got["imports"] == [], got["imports"]
