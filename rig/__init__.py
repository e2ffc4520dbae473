"""rig: a real-time audio proxy and streaming test rig for voice AI.

The rig joins a conversation with a speech system as a live participant, plays recorded
user audio into it on absolute deadlines, hears everything it says back, and stamps every
chunk in both directions on one shared monotonic clock.

Installed as the distribution `rig-voice` (`pip install rig-voice`); the import package and
the command are `rig`.
"""

from typing import TYPE_CHECKING, Any

from rig.version import __version__

if TYPE_CHECKING:  # the public API (rig.api), imported on first use: `import rig` stays light
    from rig.api import RolloutResult, RunResult, RunTables, load_run, run, run_async

_API = frozenset({"RolloutResult", "RunResult", "RunTables", "load_run", "run", "run_async"})
__all__ = [
    "RolloutResult",
    "RunResult",
    "RunTables",
    "__version__",
    "load_run",
    "run",
    "run_async",
]


def __getattr__(name: str) -> Any:
    if name in _API:
        import rig.api

        return getattr(rig.api, name)
    raise AttributeError(f"module 'rig' has no attribute {name!r}")
