"""rig's Python API: run a scenario (`run_async`, `run`) and read runs back (`load_run`).

`import rig` alone stays light: the package root re-exports these names lazily.
docs/api.md.
"""

from rig.analysis.tables import RunTables, load_tables
from rig.api.result import RolloutResult, RunResult
from rig.api.running import run, run_async

load_run = load_tables

__all__ = ["RolloutResult", "RunResult", "RunTables", "load_run", "run", "run_async"]
