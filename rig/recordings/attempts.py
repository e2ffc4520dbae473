"""Earlier attempts of a rollout, moved aside on resume as `rollouts/<id>.failed-N`.

Why one place: the runner names them, and every reader (report, summary, plots) must skip
them as rollouts yet count them as retries; a name like `a.failed-x` or `x.failed-1.bak`
is not an attempt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

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
