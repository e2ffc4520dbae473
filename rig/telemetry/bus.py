"""The in-process event bus: the session publishes, dashboards and bridges subscribe.

How this works: `EventBus.publish(event)` appends the event to each subscriber's bounded
deque and wakes the subscriber. It is synchronous, O(number of subscribers), never awaits and
never raises, so the session can call it from the audio event loop between two chunks. A
subscriber that falls behind does not slow the publisher: its deque is bounded and drops the
*oldest* event (counted in `Subscription.dropped`). Consumers read with `drain()` (all
pending events, non-blocking) or `await next_batch()`.

Publish from the loop's thread. From another thread (an audio callback), use
`publish_threadsafe`, which hands the event over with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from rig.telemetry.events import Direction, TelemetryEvent
from rig.telemetry.events import chunk as chunk_event

DEFAULT_QUEUE_SIZE = 8192


class Subscription:
    """One consumer's bounded view of the bus. Drops oldest when full, counting the drops."""

    __slots__ = ("_queue", "_wake", "_closed", "_bus", "kinds", "dropped", "received")

    def __init__(self, bus: EventBus, maxlen: int, kinds: frozenset[str] | None) -> None:
        if maxlen < 1:
            raise ValueError("a subscription needs room for at least one event")
        self._queue: deque[TelemetryEvent] = deque(maxlen=maxlen)
        self._wake = asyncio.Event()
        self._closed = False
        self._bus = bus
        self.kinds = kinds
        self.dropped = 0
        self.received = 0

    def _put(self, event: TelemetryEvent) -> None:
        q = self._queue
        if len(q) == q.maxlen:
            self.dropped += 1  # deque drops the oldest on append
        q.append(event)
        self.received += 1
        if not self._wake.is_set():
            self._wake.set()

    def _put_chunk(
        self,
        run_id: str,
        rollout_id: str,
        t_ns: int,
        direction: Direction,
        seq: int,
        n_samples: int,
        lateness_ns: int | None,
        level_dbfs: float | None,
        stall: bool | None,
    ) -> bool:
        """Take a chunk given as fields (`EventBus.publish_chunk`); False: this subscription
        wants the event itself (a subscription that folds chunks says True)."""
        return False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def closed(self) -> bool:
        return self._closed

    def drain(self, max_n: int | None = None) -> list[TelemetryEvent]:
        """Take up to `max_n` pending events (all if None), oldest first, without waiting."""
        q = self._queue
        n = len(q) if max_n is None else min(max_n, len(q))
        out = [q.popleft() for _ in range(n)]
        if not q:
            self._wake.clear()
        return out

    async def wait(self) -> None:
        """Wait until at least one event is pending (or the subscription is closed)."""
        while not self._queue and not self._closed:
            self._wake.clear()
            await self._wake.wait()

    async def next_batch(self, max_n: int | None = None) -> list[TelemetryEvent]:
        """Wait for events and take them; [] once closed and empty."""
        await self.wait()
        return self.drain(max_n)

    def close(self) -> None:
        """Stop receiving; wakes a waiting consumer."""
        if not self._closed:
            self._closed = True
            self._bus._remove(self)
            self._wake.set()


class EventBus:
    """Fan-out of telemetry events to bounded subscriptions. See the module docstring."""

    def __init__(self) -> None:
        self._subs: tuple[Subscription, ...] = ()
        self.published = 0
        self.errors = 0

    def subscribe(
        self, maxlen: int = DEFAULT_QUEUE_SIZE, kinds: Iterable[str] | None = None
    ) -> Subscription:
        """A new subscription receiving events published from now on (only `kinds` if given)."""
        sub = Subscription(self, maxlen, frozenset(kinds) if kinds is not None else None)
        self._subs = (*self._subs, sub)
        return sub

    def attach(self, sub: Subscription) -> Subscription:
        """Add a subscription made elsewhere (a subclass with its own `_put`, e.g. one that
        folds chunk events as they come: rig/telemetry/viewfeed.py)."""
        self._subs = (*self._subs, sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        self._subs = tuple(s for s in self._subs if s is not sub)

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return self._subs

    def publish(self, event: TelemetryEvent) -> None:
        """Hand `event` to every subscriber. Synchronous, never awaits, never raises."""
        self.published += 1
        for sub in self._subs:  # a tuple: subscribing during publish is safe
            try:
                if sub.kinds is None or event.kind in sub.kinds:
                    sub._put(event)
            except Exception:  # noqa: BLE001 - the audio path must never see a telemetry fault
                self.errors += 1

    def publish_chunk(
        self,
        run_id: str,
        rollout_id: str,
        t_ns: int,
        direction: Direction,
        seq: int,
        n_samples: int,
        lateness_ns: int | None = None,
        level_dbfs: float | None = None,
        stall: bool | None = None,
    ) -> None:
        """`publish(events.chunk(...))` where a subscriber folds chunks itself (the view feed):
        the fields go straight into its fold and the event is made only for a subscriber that
        queues it. A watched run publishes one per frame and direction."""
        self.published += 1
        event: TelemetryEvent | None = None
        for sub in self._subs:
            try:
                if sub.kinds is not None and "chunk" not in sub.kinds:
                    continue
                if sub._put_chunk(
                    run_id, rollout_id, t_ns, direction, seq, n_samples,
                    lateness_ns, level_dbfs, stall,
                ):  # fmt: skip
                    continue
                if event is None:
                    event = chunk_event(
                        run_id, rollout_id, t_ns, direction, seq, n_samples,
                        lateness_ns=lateness_ns, level_dbfs=level_dbfs, stall=stall,
                    )  # fmt: skip
                sub._put(event)
            except Exception:  # noqa: BLE001 - the audio path must never see a telemetry fault
                self.errors += 1

    def publish_threadsafe(self, loop: asyncio.AbstractEventLoop, event: TelemetryEvent) -> None:
        """Publish from a thread that is not running `loop` (e.g. an audio callback)."""
        try:
            loop.call_soon_threadsafe(self.publish, event)
        except RuntimeError:  # loop closed: telemetry is best effort
            self.errors += 1
