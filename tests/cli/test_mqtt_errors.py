"""MQTT failures are said: a watcher or a run with no broker tells the user, not silence."""

from __future__ import annotations

import pytest

from tests.support.cli import free_port, rig

pytest.importorskip("aiomqtt")


def test_watch_without_a_broker_says_so_and_fails() -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    r = rig("watch", "--mqtt", url, "--duration", "1.5", "--headless", timeout=30)
    assert r.returncode == 1
    assert f"rig watch: cannot reach the MQTT broker at {url}" in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith(f"rig watch: error: never reached the MQTT broker at {url}")
    )


def test_watch_url_without_a_scheme_names_the_value() -> None:
    r = rig("watch", "--mqtt", "localhost", timeout=30)
    assert r.returncode == 2
    assert "got 'localhost' (e.g. mqtt://localhost)" in r.stderr


@pytest.mark.realtime
def test_run_without_a_broker_says_telemetry_was_not_published(tmp_path) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    r = rig("demo", "--headless", "--mqtt", url, "--out", str(tmp_path), timeout=90)
    assert r.returncode == 0, r.stderr
    assert f"rig: cannot reach the MQTT broker at {url}" in r.stderr
    assert "rig: no telemetry was published: never reached the MQTT broker" in r.stderr
