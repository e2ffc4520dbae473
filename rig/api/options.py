"""Keyword options of `rig.run` -> the `rig run` command line's namespace.

The API has no option table of its own: it reads every option, its default and its type
from the `rig run` parser, so a new CLI option is an API option with the same default the
moment it exists, and both paths go through the same checks (`rig.cli.run.prepare`).
"""

from __future__ import annotations

import argparse
import difflib
import json
from typing import Any

from rig.cli import run as run_cmd
from rig.cli.demo import DEMO_CONCURRENCY
from rig.errors import ConfigError

#: API spellings that differ from the parser's `dest`
ALIASES = {"dialect_options": "dialect_opt", "out_dir": "out"}


def run_parser() -> argparse.ArgumentParser:
    """The `rig run` parser alone (its options, defaults and types)."""
    parser = argparse.ArgumentParser(prog="rig", add_help=False)
    sub = parser.add_subparsers(dest="command")
    run_cmd.add_parser(sub)
    return parser


def _actions() -> dict[str, argparse.Action]:
    sub = next(a for a in run_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices["run"]._actions if a.dest != "help"}


def option_names() -> list[str]:
    """Every keyword `rig.run` takes (besides the scenario)."""
    return sorted(set(_actions()) - {"scenario"} | set(ALIASES))


def namespace(scenario: str, options: dict[str, Any]) -> argparse.Namespace:
    """The namespace `rig run SCENARIO` would parse, with `options` in place of flags.

    Raises ConfigError for an unknown option or a value of the wrong type, naming the flag."""
    if not isinstance(scenario, str) or not scenario:
        raise ConfigError(f"scenario must be a path or builtin:NAME, got {scenario!r}")
    args = run_parser().parse_args(["run", scenario])
    if options.get("transport") != "device":  # as `rig demo`: one sound card is one rollout
        args.concurrency = DEMO_CONCURRENCY
    actions = _actions()
    for key, value in options.items():
        dest = ALIASES.get(key, key)
        action = actions.get(dest)
        if action is None or dest == "scenario":
            near = difflib.get_close_matches(key, option_names(), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"rig.run: unknown option {key!r}{hint}")
        if dest == "dialect_opt" and isinstance(value, dict):
            value = [_dialect_pair(k, v) for k, v in value.items()]
        if value is not None:
            value = _check_type(key, action, value)
        setattr(args, dest, value)
    return args


def _dialect_pair(key: Any, value: Any) -> str:
    """`{"voice": "123"}` -> `voice="123"`: values go as JSON, so a string stays a string
    (on the command line `voice=123` would be the number)."""
    if not isinstance(key, str) or not key.strip() or "=" in key:
        raise ConfigError(f"rig.run: dialect_options keys must be names, got {key!r}")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"rig.run: dialect_options[{key!r}] is not JSON: {exc}") from exc
    return f"{key}={text}"


def _flag(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def _check_type(key: str, action: argparse.Action, value: Any) -> Any:
    """The value as the parser would have it, or ConfigError naming the option."""
    flag = f"{key} ({_flag(action)})"
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise ConfigError(f"rig.run: {flag} must be True or False, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"rig.run: {flag} must be a list of strings, got {value!r}")
        return list(value)
    want = action.type
    if want is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        kind = "an integer"
    elif want is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        kind = "a number"
    elif want is None:
        ok = isinstance(value, str)
        kind = "a string"
    else:  # a parser function (e.g. "auto" or a number): strings go through it, as on the CLI
        if isinstance(value, str) and callable(want):
            try:
                return want(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                raise ConfigError(f"rig.run: {flag}: {exc}") from exc
        return value
    if not ok:
        raise ConfigError(f"rig.run: {flag} must be {kind}, got {value!r}")
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(str(c) for c in action.choices)
        raise ConfigError(f"rig.run: {flag} must be one of {choices}, got {value!r}")
    return value
