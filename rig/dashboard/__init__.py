"""Terminal dashboard: pure renderers over frozen snapshots, and the Live/headless driver."""

from rig.dashboard.live import Dashboard
from rig.dashboard.render import render

__all__ = ["Dashboard", "render"]
