"""A run made behind `--impair` says so at the top of its report."""

from __future__ import annotations

import pytest

from rig.scenarios import data_path
from tests.support.cli import rig
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime


def test_an_impaired_run_says_it_was_impaired(tmp_path) -> None:
    sim, url = start_sim()
    try:
        r = rig("run", str(data_path("turn_what.wav")), "--target", url, "--impair",
                "mobile-4g", "--headless", "--out", str(tmp_path), "--run-id", "imp")  # fmt: skip
    finally:
        stop_sim(sim)
    assert r.returncode in (0, 3), r.stderr
    rep = rig("report", str(tmp_path / "imp"), env={"COLUMNS": "200"})
    first = rep.stdout.splitlines()[0]
    assert first.startswith("network impaired on purpose (--impair): mobile-4g; up 35 ms delay")
