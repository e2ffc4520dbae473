"""Scale-out options refused up front (exit 2, nothing opened or written)."""

from __future__ import annotations

import pytest

from rig.cli import main

BASE = ["run", "builtin:demo", "--target", "ws://127.0.0.1:9/", "--headless"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--shard", "3/3"], "--shard 3/3"),
        (["--shard", "x"], "--shard wants K/N"),
        (["--shards", "2"], "go with --engine ray"),
        (["--engine", "ray", "--shard", "0/2"], "drop --shard"),
        (["--engine", "ray", "--shards", "0"], "--shards must be"),
        (["--engine", "ray", "--ray-cpus-per-shard", "0"], "--ray-cpus-per-shard must be"),
        (["--results", "object-store"], "go with --engine ray"),
        (["--fleet-listen", "0.0.0.0:7070"], "go with --engine ray"),
        (["--engine", "ray", "--fleet-listen", "nohost"], "--fleet-listen wants HOST:PORT"),
        (
            ["--engine", "ray", "--transport", "device", "--output", "x", "--input", "y"],
            "not over this sound card",
        ),
    ],
)
def test_refused(tmp_path, capsys, extra: list[str], message: str) -> None:
    assert main([*BASE, "--out", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
