"""`rig report` on a real `rig proxy` run shows each client's latency split into its legs;
`rig plot` on a connection recorded without audio says why there is nothing to draw."""

from __future__ import annotations

from pathlib import Path

import pytest

from rig.scenarios import data_path
from tests.support.cli import rig
from tests.support.proxyproc import start_proxy, stop_proxy
from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime


@pytest.fixture(scope="module")
def proxy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proxy")
    sim, url = start_sim()
    try:
        proxy, purl = start_proxy(url, str(out), "--run-id", "px")
        try:
            r = rig("run", str(data_path("turn_what.wav")), "--target", purl, "--headless",
                    "--out", str(out), "--run-id", "client")  # fmt: skip
            assert r.returncode in (0, 3), r.stderr
        finally:
            stop_proxy(proxy)
    finally:
        stop_sim(sim)
    return out / "px"


def test_the_report_shows_the_client_seen_latency_and_its_legs(proxy_run: Path) -> None:
    r = rig("report", str(proxy_run), "--no-rollouts", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    assert "client-seen latency through rig proxy (ms)" in r.stdout
    header = next(line for line in r.stdout.splitlines() if "client-seen" in line and "┃" in line)
    for col in ("client leg", "proxy", "upstream leg", "system"):
        assert col in header
    row = next(line for line in r.stdout.splitlines() if line.startswith("│ conn-0001 "))
    assert "±" in row  # client-seen ± its error


def test_plot_of_a_connection_without_audio_says_so(proxy_run: Path) -> None:
    conn = proxy_run / "rollouts" / "conn-0001"
    r = rig("plot", str(conn))
    assert r.returncode == 2
    assert "recorded by rig proxy without --record-audio" in r.stderr
    assert f"rig report {proxy_run}" in r.stderr
