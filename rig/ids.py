"""Ids that become names on disk (run ids, rollout and item ids) or MQTT topic levels.

An id is one safe path part: a letter or digit, then letters, digits, `_`, `-`, `.`, at most
128 characters, matched with `\\A...\\Z` (a `$` would accept a trailing newline). No path
separator, no `..` on its own, nothing hidden (a leading dot). `--run-id ../../x` must never
write outside `--out`.
"""

from __future__ import annotations

import re

from rig.errors import ConfigError

ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")


def id_problem(value: object) -> str | None:
    """Why `value` is not a usable id (None: it is one)."""
    if not isinstance(value, str) or not ID.match(value):
        return (
            f"{value!r:.80} is not an id: use 1-128 letters, digits, '_', '-', '.', "
            "starting with a letter or digit (no path separators)"
        )
    return None


def check_id(value: str, what: str) -> str:
    """`value` if it is a safe id, else ConfigError naming `what` (e.g. `--run-id`)."""
    problem = id_problem(value)
    if problem is not None:
        raise ConfigError(f"{what}: {problem}")
    return value


def safe_id(text: str) -> str:
    """An id made from free text (a WAV file's stem): other characters become `_`."""
    out = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:128]
    if not out or not out[0].isalnum() or not out[0].isascii():
        out = ("x" + out)[:128]
    return out
