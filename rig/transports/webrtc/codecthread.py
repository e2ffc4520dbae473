"""Opus decoding off the event loop: one codec thread per process, frames handed over in batches.

Why: libopus runs inside PyAV with the GIL released (PyAV wraps `avcodec_send_packet` and
`avcodec_receive_frame` in `nogil`), so a frame decoded here overlaps the loop's Python work
on the other core instead of running between two pacer deadlines. Only the downlink goes
here: a downlink frame's time is its jitter-buffer release, stamped on the loop before the
hand-over, so the hop delays the frame's delivery to the session but changes no timestamp.
(The uplink encoder stays inline: the send time is when `sendto` returned, and a thread hop
in front of it would be measured as lateness; see docs/webrtc.md for the numbers.)

How this works: a transport owns a `DecodeLane` (its decoder, its loop, its delivery
callback). `submit(frames)` is one `SimpleQueue.put` (C, no Python lock). The thread takes
everything queued, decodes lane by lane and sends each loop its results with one
`call_soon_threadsafe` per batch, not per frame. Order: one thread and a FIFO queue, so each
lane gets its frames back in the order it submitted them. Errors: a frame that fails to
decode (or whose level cannot be taken) comes back as its exception, in its place in the
order; the transport raises it from `receive()`, so the rollout ends with that message.
Shutdown: a closed lane's pending frames are dropped
(in the thread, and again on the loop for results already on the way); the thread exits
when its last lane closes and a new one starts with the next lane.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from rig.audio.pcm import Pcm16
from rig.transports.webrtc.rtp import BufferedFrame

_STOP = object()


class Decoded(NamedTuple):
    """One released frame and its decoded PCM (`error` set instead when decoding failed)."""

    frame: BufferedFrame
    pcm: Pcm16 | None
    peak: int
    error: BaseException | None


def peak(pcm: Pcm16) -> int:
    """Largest |sample| (two reductions, no temporary array)."""
    return max(int(pcm.max()), -int(pcm.min())) if pcm.size else 0


class DecodeLane:
    """One stream's way through the codec thread; results arrive on `loop` via `deliver`."""

    def __init__(
        self,
        decoder: Any,  # has decode(payload: bytes) -> Pcm16
        deliver: Callable[[list[Decoded]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.decoder = decoder
        self.deliver = deliver
        self.loop = loop
        self.closed = False
        self._thread = CodecThread.acquire()

    def submit(self, frames: list[BufferedFrame]) -> None:
        if not self.closed:
            self._thread.put(self, frames)

    def close(self) -> None:
        """No more frames: pending ones are dropped; the thread exits after its last lane."""
        if not self.closed:
            self.closed = True
            self._thread.release()


class CodecThread:
    """The process's decode thread (started by the first lane, stopped after the last)."""

    _lock = threading.Lock()
    _current: CodecThread | None = None

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._users = 0
        self.batches = 0
        self.frames = 0
        self.thread = threading.Thread(target=self._run, name="rig-opus-decode", daemon=True)

    @classmethod
    def acquire(cls) -> CodecThread:
        with cls._lock:
            ct = cls._current
            if ct is None:
                ct = cls._current = CodecThread()
                ct.thread.start()
            ct._users += 1
            return ct

    def release(self) -> None:
        with CodecThread._lock:
            self._users -= 1
            if self._users == 0:
                if CodecThread._current is self:
                    CodecThread._current = None
                self._q.put(_STOP)

    def put(self, lane: DecodeLane, frames: list[BufferedFrame]) -> None:
        self._q.put((lane, frames))

    # --- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._q.get()]
            while True:
                try:
                    batch.append(self._q.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in batch)
            out: dict[asyncio.AbstractEventLoop, list[tuple[DecodeLane, list[Decoded]]]] = {}
            for item in batch:
                if item is _STOP:
                    continue
                lane, frames = item
                if lane.closed:
                    continue
                out.setdefault(lane.loop, []).append((lane, self._decode(lane, frames)))
            self.batches += 1
            for loop, results in out.items():
                try:
                    loop.call_soon_threadsafe(_deliver, results)
                except RuntimeError:  # that loop is closed: its rollouts are gone
                    pass
            if stop:
                return

    def _decode(self, lane: DecodeLane, frames: list[BufferedFrame]) -> list[Decoded]:
        res: list[Decoded] = []
        decode = lane.decoder.decode
        for f in frames:
            try:
                pcm = decode(f.payload)
                res.append(Decoded(f, pcm, peak(pcm), None))
            except Exception as exc:  # noqa: BLE001 - handed to the rollout, raised there
                res.append(Decoded(f, None, 0, exc))
        self.frames += len(frames)
        return res


def _deliver(results: list[tuple[DecodeLane, list[Decoded]]]) -> None:
    for lane, decoded in results:
        if not lane.closed:
            lane.deliver(decoded)
