"""rig: a real-time audio proxy and streaming test rig for voice AI.

The rig joins a conversation with a speech system as a live participant, plays recorded
user audio into it on absolute deadlines, hears everything it says back, and stamps every
chunk in both directions on one shared monotonic clock.

Installed as the distribution `rig-voice` (`pip install rig-voice`); the import package and
the command are `rig`.
"""

#: the one version string: pyproject.toml reads it (setuptools dynamic version), and
#: `rig --version`, the run manifest and the Pipecat client metadata print it
__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

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
