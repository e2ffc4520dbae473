"""A port that cannot be bound, as one line instead of a traceback (`rig sim`, `rig proxy`).

A leftover `rig sim &` from the README's minimal session holds 8765: the most common way a
new user meets this. Standard library only (imported when the parser is built).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

from rig.errors import RigError

_WHY = {
    errno.EADDRINUSE: "address already in use (another rig sim or rig proxy still running? "
    "stop it, or pick another port: {free} takes a free one)",
    errno.EACCES: "permission denied (ports below 1024 need root)",
    errno.EADDRNOTAVAIL: "no such address on this machine",
}


class ListenError(RigError):
    """The listening socket could not be opened (exit 1: the command failed)."""


@contextlib.contextmanager
def listening(host: str, port: int | str, free: str = "--port 0") -> Iterator[None]:
    """Turn a bind failure inside the block into `ListenError` naming host, port and why
    (`free`: the option that picks a free port); any other OSError passes through."""
    try:
        yield
    except OSError as exc:
        why = _WHY.get(exc.errno or 0)
        if why is None:
            raise
        why = why.format(free=free)
        raise ListenError(f"cannot listen on {host}:{port}: {why}") from exc
