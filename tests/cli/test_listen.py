"""A port already in use: one line naming the port and what to do, exit 1, no traceback."""

from __future__ import annotations

import socket

import pytest

from tests.support.cli import rig


@pytest.mark.parametrize("command", ["sim", "proxy"])
def test_a_busy_port_is_one_line(tmp_path, command: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        if command == "sim":
            r = rig("sim", "--port", str(port), timeout=30)
        else:
            r = rig("proxy", "--listen", f"127.0.0.1:{port}", "--upstream", "ws://127.0.0.1:9",
                    "--out", str(tmp_path), timeout=30)  # fmt: skip
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in line
    assert "Traceback" not in r.stderr
