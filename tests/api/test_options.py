"""rig.api.options: keyword options -> the RunConfig `rig run` builds (no run, no I/O)."""

from __future__ import annotations

import pytest

from rig.api.options import config, option_names
from rig.cli import build_parser
from rig.cli.runopts import config_from_args
from rig.errors import ConfigError


def test_defaults_are_the_cli_defaults() -> None:
    api = config("builtin:demo", {})
    cli = config_from_args(build_parser().parse_args(["run", "builtin:demo"]))
    demo = config_from_args(build_parser().parse_args(["demo"]))
    # one on purpose: rollouts at once as `rig demo` (builtin:demo in ~7 s, not ~19 s)
    assert api == cli.replace(scale__concurrency=demo.scale.concurrency)
    assert api.scale.concurrency == 3
    assert config("builtin:demo", {"transport": "device"}).scale.concurrency == 1  # one card
    assert {"concurrency", "max_s", "headless", "otel", "dialect_options"} <= set(option_names())


def test_dialect_options_keep_their_types() -> None:
    cfg = config("x.wav", {"dialect_options": {"voice": "123", "n": 2, "vad": None,
                                               "model": "gpt"}})  # fmt: skip
    assert cfg.target.dialect_opt == {"voice": "123", "n": 2, "vad": None,
                                      "model": "gpt"}  # fmt: skip
    with pytest.raises(ConfigError, match="keys must be names"):
        config("x.wav", {"dialect_options": {"a=b": 1}})
    with pytest.raises(ConfigError, match="is not JSON"):
        config("x.wav", {"dialect_options": {"f": float("nan")}})


def test_types_and_choices() -> None:
    assert config("x.wav", {"max_s": 5}).session.max_s == 5  # an int is a number
    with pytest.raises(ConfigError, match=r"headless \(--headless\) must be True or False"):
        config("x.wav", {"headless": 1})
    with pytest.raises(ConfigError, match=r"max_s \(--max-s\) must be a number"):
        config("x.wav", {"max_s": True})
    with pytest.raises(ConfigError, match=r"backend \(--backend\) must be one of"):
        config("x.wav", {"backend": "alsa"})
    with pytest.raises(ConfigError, match="scenario must be"):
        config("", {})


def test_the_config_goes_to_a_worker_and_back_as_json() -> None:
    """What a worker process or an engine's shard gets is exactly the parent's run."""
    from rig.runs.config import RunConfig

    cli = config_from_args(
        build_parser().parse_args(
            ["run", "x.wav", "--target", "ws://h:1/", "--shard", "1/3", "--concurrency", "auto",
             "--dialect-opt", "voice=\"7\"", "--sweep", "a=1,2", "--timing-tolerance-ms", "7"]
        )
    )  # fmt: skip
    assert RunConfig.from_json(cli.to_json()) == cli
    assert cli.scale.shard is not None and cli.scale.shard.label == "1/3"
    assert cli.tolerance.lateness_p99_ms == 7.0 and cli.target.dialect_opt == {"voice": "7"}
