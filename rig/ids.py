"""Ids that become names on disk (run ids, rollout and item ids) or MQTT topic levels.

An id is one safe path part: a letter or digit, then letters, digits, `_`, `-`, `.`, at most
128 characters, matched with `\\A...\\Z` (a `$` would accept a trailing newline). No path
separator, no `..` on its own, nothing hidden (a leading dot). `--run-id ../../x` must never
write outside `--out`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

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


# Earlier attempts of a rollout, moved aside on resume as `rollouts/<id>.failed-N`. One place
# because the runner names them, and every reader (report, summary, plots) must skip them as
# rollouts yet count them as retries; `a.failed-x` or `x.failed-1.bak` is not an attempt.
ATTEMPT = re.compile(r"\A(?P<rollout>.+)\.failed-(?P<n>[0-9]+)\Z")


def attempt_name(rollout_id: str, n: int) -> str:
    return f"{rollout_id}.failed-{n}"


def rollout_of_attempt(name: str) -> str | None:
    """The rollout id a moved-aside attempt belongs to (None: not an attempt)."""
    m = ATTEMPT.match(name)
    return m.group("rollout") if m else None


def count_retries(names: Iterable[str]) -> dict[str, int]:
    """Rollout id -> number of moved-aside attempts among directory `names`."""
    out: dict[str, int] = {}
    for name in names:
        rid = rollout_of_attempt(name)
        if rid is not None:
            out[rid] = out.get(rid, 0) + 1
    return out
