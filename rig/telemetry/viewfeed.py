"""The view feed: the bus, coalesced per refresh, over a local socket to the live view process.

How this works: the audio process keeps publishing on the bus exactly as before. `ViewFeed`
holds one bounded bus subscription whose `_put` folds each chunk event into one pending
`chunk_batch` per rollout and direction as it is published (`ChunkCoalescer`, O(1); other
events are queued as they are). `flush_hz` times a second, on the loop, it encodes the
batches and the queued events as the versioned JSON payloads of the MQTT bridge, one per
line, 16 at a time with a yield to the loop in between, and sends the frame as a few
messages on a non-blocking `SOCK_SEQPACKET` Unix socket. (Modes "loop" and "thread" put the
folding in the periodic flush, or everything in a thread, for the bench that compared them:
docs/telemetry.md.) Message boundaries are
kept and a message goes whole or not at all, so a full socket (a view that stopped reading)
drops that message and counts its events (`stats.dropped`), never blocks and never tears a
line; the latest `status` and `run` of everything dropped go out again with the next frame so
the view cannot get stuck on a stale state. When the view goes away (EOF, EPIPE), the feed
stops sending and sets `closed`; the run goes on.

The view process reads with `FrameReader`: bytes in (whole messages, or any chunking of the
same lines from a file), events out onto its own bus. Nothing here imports rich.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rig.aio import finish_or_cancel
from rig.clock.base import Clock, MonotonicClock
from rig.core.units import NS_PER_S
from rig.errors import ProtocolError
from rig.telemetry.bus import EventBus, Subscription
from rig.telemetry.coalesce import ChunkCoalescer
from rig.telemetry.events import Direction, TelemetryEvent
from rig.telemetry.lifecycle import StartStop
from rig.telemetry.wire import RETAINED_KINDS, decode, encode

# Work between two yields to the loop, each well under 0.3 ms of CPU (measured: folding
# ~1 us per chunk event, encoding ~10-15 us per chunk_batch).
DRAIN_SLICE = 128
ENCODE_SLICE = 16
MAX_MESSAGE = 48 * 1024  # bytes per socket message (well under the socket buffer)
READY = b"ready"  # what the view sends once it can draw


@dataclass(slots=True)
class FeedStats:
    frames: int = 0  # flushes that sent something
    messages: int = 0
    events: int = 0  # events sent (a chunk_batch counts once)
    dropped: int = 0  # events in messages the socket had no room for
    dropped_queue: int = 0  # events the bus subscription dropped (the feed fell behind)
    busy_ns: int = 0  # loop thread CPU time spent flushing (drain, coalesce, encode, send)
    max_busy_slice_ns: int = 0  # longest CPU stretch between two yields


FEED_MODES = ("put", "loop", "thread")


class _FoldingSubscription(Subscription):
    """A bus subscription that folds chunk events into the coalescer as they are published
    (O(1) each), so a flush only encodes one batch per rollout and direction."""

    __slots__ = ("coalescer",)

    def __init__(self, bus: EventBus, maxlen: int, coalescer: ChunkCoalescer) -> None:
        super().__init__(bus, maxlen, None)
        self.coalescer = coalescer

    def _put(self, event: TelemetryEvent) -> None:
        if event.kind == "chunk":
            self.coalescer.add(event)
            self.received += 1
        else:
            super()._put(event)

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
        self.coalescer.add_fields(
            run_id, rollout_id, t_ns, direction, seq, n_samples, lateness_ns, level_dbfs, stall
        )
        self.received += 1
        return True


class ViewFeed(StartStop):
    """Bus → coalesced frames → the view's socket. See the module docstring.

    `mode` says where the work happens (bench/dashboard.py compares them; docs/telemetry.md):
    "put" folds each chunk event into its batch as it is published and encodes on the loop in
    slices; "loop" drains the subscription on the loop, then folds and encodes in slices;
    "thread" drains, folds, encodes and sends in a thread of its own (sharing the GIL).
    """

    def __init__(
        self,
        bus: EventBus,
        sock: socket.socket,
        *,
        flush_hz: float = 4.0,
        queue_size: int = 65536,
        max_message: int = MAX_MESSAGE,
        mode: str = "put",
        on_message: Callable[[bytes], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        if flush_hz <= 0:
            raise ValueError("flush_hz must be positive")
        if mode not in FEED_MODES:
            raise ValueError(f"mode must be one of {FEED_MODES}, not {mode!r}")
        self.stats = FeedStats()
        self.mode = mode
        self.period_s = 1.0 / flush_hz
        self.ready = asyncio.Event()
        self.closed = asyncio.Event()
        self._bus = bus
        self._sock = sock
        self._queue_size = queue_size
        self._max_message = max_message
        self._on_message = on_message
        self._clock: Clock = clock or MonotonicClock()  # stamps each coalescer flush
        self._coalescer = ChunkCoalescer(int(NS_PER_S / flush_hz))
        self._resend: dict[tuple[str, str, str], TelemetryEvent] = {}
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._reading = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_stop = threading.Event()
        self._gone = False  # set from any thread; `closed` is set on the loop

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._sock.setblocking(False)
        if self.mode == "put":
            self._sub = self._bus.attach(
                _FoldingSubscription(self._bus, self._queue_size, self._coalescer)
            )
        else:
            self._sub = self._bus.subscribe(self._queue_size)
        loop = self._loop = asyncio.get_running_loop()
        loop.add_reader(self._sock.fileno(), self._on_readable)
        self._reading = True
        if self.mode == "thread":
            self._thread = threading.Thread(target=self._thread_main, name="view-feed", daemon=True)
            self._thread.start()
        else:
            self._task = loop.create_task(self._run(), name="view-feed")

    async def stop(self, timeout_s: float = 2.0) -> None:
        """Send what is pending (one last frame), then close our end: the view sees EOF."""
        self._stopping.set()
        if self._task is not None:
            task, self._task = self._task, None
            try:
                await finish_or_cancel(task, timeout_s)
            except asyncio.CancelledError:
                self._close_socket()  # our caller's cancel: stopped all the same, then raised
                raise
        if self._thread is not None:
            self._thread_stop.set()
            await asyncio.to_thread(self._thread.join, timeout_s)
            self._thread = None
        self._close_socket()

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

    # -- on the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping.is_set() and not self.closed.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period_s):
                    await self._stopping.wait()
            await self.flush()

    async def flush(self) -> None:
        """One frame: everything pending, chunks coalesced, as few messages as fit."""
        sub = self._sub
        if sub is None or self.closed.is_set():
            return
        busy = _Busy(self.stats)
        out: list[TelemetryEvent] = list(self._resend.values())
        self._resend.clear()
        while len(sub) > 0:
            out += self._coalescer.fold_from(sub, DRAIN_SLICE)
            await busy.yield_()
        self.stats.dropped_queue = sub.dropped
        batches = self._coalescer.iter_flush(self._clock.now_ns(), force=True)
        sender = _Frame(self)
        for i, ev in enumerate(itertools.chain(out, batches)):
            sender.add(ev)
            if i % ENCODE_SLICE == ENCODE_SLICE - 1:
                await busy.yield_()
        sender.finish()
        busy.done()

    # -- in a thread (mode "thread") ---------------------------------------------------------------

    def _thread_main(self) -> None:
        while not self._gone:
            stopping = self._thread_stop.wait(self.period_s)
            self._flush_sync()
            if stopping:
                return

    def _flush_sync(self) -> None:
        sub = self._sub
        if sub is None or self._gone:
            return
        busy = _Busy(self.stats)
        out: list[TelemetryEvent] = list(self._resend.values())
        self._resend.clear()
        out += self._coalescer.fold_from(sub)
        self.stats.dropped_queue = sub.dropped
        out.extend(self._coalescer.flush(self._clock.now_ns(), force=True))
        if out:
            sender = _Frame(self)
            for ev in out:
                sender.add(ev)
            sender.finish()
        busy.done()

    # -- sending -------------------------------------------------------------------------------

    def _send(self, lines: list[bytes], batch: list[TelemetryEvent]) -> None:
        if self._gone:
            return
        message = b"\n".join(lines) + b"\n"
        n_events = len(batch)
        try:
            self._sock.send(message)
        except BlockingIOError:
            self.stats.dropped += n_events
            for ev in batch:  # the latest state must reach the view eventually
                if ev.kind in RETAINED_KINDS:
                    self._resend[(ev.kind, ev.run_id, ev.rollout_id)] = ev
            return
        except OSError:  # EPIPE, ECONNRESET: the view is gone
            self.stats.dropped += n_events
            self._peer_gone_any_thread()
            return
        self.stats.messages += 1
        self.stats.events += n_events
        if self._on_message is not None:
            self._on_message(message)

    # -- the view's side of the socket ---------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(256)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._peer_gone()
        elif data.startswith(READY):
            self.ready.set()

    def _peer_gone_any_thread(self) -> None:
        self._gone = True
        loop = self._loop
        if loop is None or threading.current_thread() is not self._thread:
            self._peer_gone()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._peer_gone)

    def _peer_gone(self) -> None:
        self._gone = True
        if not self.closed.is_set():
            self.closed.set()
            self._stop_reading()
            if self._sub is not None:
                self._sub.close()  # off the bus: publishing costs nothing more for the view

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())

    def _close_socket(self) -> None:
        self._stop_reading()
        if self._sub is not None:
            self._sub.close()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._gone = True
        self.closed.set()


class _Frame:
    """Encodes one flush's events into messages of at most `max_message` bytes."""

    __slots__ = ("_feed", "_lines", "_batch", "_size")

    def __init__(self, feed: ViewFeed) -> None:
        self._feed = feed
        self._lines: list[bytes] = []
        self._batch: list[TelemetryEvent] = []
        self._size = 0

    def add(self, ev: TelemetryEvent) -> None:
        line = encode(ev)
        if self._lines and self._size + len(line) + 1 > self._feed._max_message:
            self._flush()
        self._lines.append(line)
        self._batch.append(ev)
        self._size += len(line) + 1

    def _flush(self) -> None:
        self._feed._send(self._lines, self._batch)
        self._lines, self._batch, self._size = [], [], 0

    def finish(self) -> None:
        if self._lines:
            self._flush()
            self._feed.stats.frames += 1


class _Busy:
    """Accounts the loop time one flush takes, split at its yields."""

    __slots__ = ("_stats", "_t")

    def __init__(self, stats: FeedStats) -> None:
        self._stats = stats
        self._t = time.thread_time_ns()

    def _lap(self) -> None:
        now = time.thread_time_ns()
        took = now - self._t
        self._stats.busy_ns += took
        self._stats.max_busy_slice_ns = max(self._stats.max_busy_slice_ns, took)
        self._t = now

    async def yield_(self) -> None:
        self._lap()
        await asyncio.sleep(0)
        self._t = time.thread_time_ns()

    def done(self) -> None:
        self._lap()


class FrameReader:
    """The view's end: bytes (socket messages or a file's chunks) in, events onto a bus."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._tail = b""
        self.received = 0
        self.malformed = 0

    def feed(self, data: bytes) -> int:
        """Decode every complete line in `data` (keeping a partial last line); events published."""
        buf = self._tail + data
        *lines, self._tail = buf.split(b"\n")
        n = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = decode(line)
            except ProtocolError:
                self.malformed += 1
                continue
            self._bus.publish(ev)
            n += 1
        self.received += n
        return n


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(audio end, view end): a connected SOCK_SEQPACKET pair; the view end is inheritable."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.set_inheritable(True)
    return ours, theirs
