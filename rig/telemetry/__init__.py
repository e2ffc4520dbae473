"""Telemetry: the in-process event bus, event records, the snapshot reducer, the MQTT bridge.

The session publishes `TelemetryEvent`s on an `EventBus` (synchronous, never blocks); the
dashboard and the MQTT bridge subscribe with bounded queues. See docs/telemetry.md.
"""

from rig.telemetry import events
from rig.telemetry.bus import EventBus, Subscription
from rig.telemetry.events import SCHEMA_VERSION, TelemetryEvent
from rig.telemetry.snapshot import FleetSnapshot, Reducer, RolloutSnapshot

__all__ = [
    "SCHEMA_VERSION",
    "EventBus",
    "FleetSnapshot",
    "Reducer",
    "RolloutSnapshot",
    "Subscription",
    "TelemetryEvent",
    "events",
]
