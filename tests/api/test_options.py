"""rig.api.options: keyword options -> the `rig run` namespace (no run, no I/O)."""

from __future__ import annotations

import pytest

from rig.api.options import namespace, option_names
from rig.cli import build_parser
from rig.cli.common import parse_dialect_options
from rig.errors import ConfigError


def test_defaults_are_the_cli_defaults() -> None:
    api = namespace("builtin:demo", {})
    cli = build_parser().parse_args(["run", "builtin:demo"])
    demo = build_parser().parse_args(["demo"])
    # one on purpose: rollouts at once as `rig demo` (builtin:demo in ~7 s, not ~19 s)
    assert vars(api) == {**vars(cli), "concurrency": demo.concurrency}
    assert api.concurrency == 3
    assert namespace("builtin:demo", {"transport": "device"}).concurrency == 1  # one card
    assert {"concurrency", "max_s", "headless", "otel", "dialect_options"} <= set(option_names())


def test_dialect_options_keep_their_types() -> None:
    args = namespace("x.wav", {"dialect_options": {"voice": "123", "n": 2, "vad": None,
                                                   "model": "gpt"}})  # fmt: skip
    assert parse_dialect_options(args.dialect_opt) == {"voice": "123", "n": 2, "vad": None,
                                                       "model": "gpt"}  # fmt: skip
    with pytest.raises(ConfigError, match="keys must be names"):
        namespace("x.wav", {"dialect_options": {"a=b": 1}})
    with pytest.raises(ConfigError, match="is not JSON"):
        namespace("x.wav", {"dialect_options": {"f": float("nan")}})


def test_types_and_choices() -> None:
    assert namespace("x.wav", {"max_s": 5}).max_s == 5  # an int is a number
    with pytest.raises(ConfigError, match=r"headless \(--headless\) must be True or False"):
        namespace("x.wav", {"headless": 1})
    with pytest.raises(ConfigError, match=r"max_s \(--max-s\) must be a number"):
        namespace("x.wav", {"max_s": True})
    with pytest.raises(ConfigError, match=r"backend \(--backend\) must be one of"):
        namespace("x.wav", {"backend": "alsa"})
    with pytest.raises(ConfigError, match="scenario must be"):
        namespace("", {})


def test_result_ok_needs_every_rollout_ok_and_its_timing_valid(tmp_path: object) -> None:
    from pathlib import Path

    from rig.api.result import RolloutResult, RunResult

    def r(status: str, valid: bool | None) -> RolloutResult:
        m = {"rollout_id": "a", "status": status, "timing_valid": valid}
        return RolloutResult.from_metrics(Path("run"), m)

    def run(*rs: RolloutResult, stop: str | None = None) -> RunResult:
        return RunResult("run", Path("run"), list(rs), stop)

    assert run(r("ok", True), r("ok", None)).exit_code == 0
    assert run(r("ok", True), r("ok", False)).exit_code == 3
    assert run(r("ok", None), r("error", None)).exit_code == 3
    assert not run(r("ok", None), stop="disk full").ok
