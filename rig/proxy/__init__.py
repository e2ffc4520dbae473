"""The measuring WebSocket proxy (`rig proxy`): `server` accepts and forwards, `connection`
accounts one connection into the rig's core and run directory. docs/proxy.md."""

from rig.proxy.connection import message_meta
from rig.proxy.server import FORWARDED_HEADERS, RecordingProxy, upstream_for

__all__ = ["FORWARDED_HEADERS", "RecordingProxy", "message_meta", "upstream_for"]
