"""The real-time callbacks: the only code that runs on PortAudio's audio thread.

The rules (python-sounddevice's, and PortAudio's): a callback must return within the time
one block lasts, so it never blocks (no locks the loop thread could hold, no I/O, no
waiting on the event loop), allocates as little as it can, never raises, and fills the
output buffer in place (`outdata[:] = ...`; a new array would not reach PortAudio).

So each callback only copies: the captured samples out (one small array per block), the
next queued samples in, then hands the record to the event loop with
`loop.call_soon_threadsafe` (non-blocking). It stamps the block on the shared clock at entry
and keeps PortAudio's time_info and status flags (xruns); nothing is thrown away.

Shared state between the two threads is single-writer: the play queue is a deque (append
on the loop thread, popleft on the audio thread: both atomic), and its fill level is two
counters, each written by one thread only (frames pushed, frames taken), never one counter
changed from both.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.device.model import Block, Direction, StreamEnded


class Playout:
    """The output queue: filled from the loop thread, drained by the audio callback."""

    def __init__(self) -> None:
        self._chunks: collections.deque[Pcm16] = collections.deque()
        self._head_pos = 0  # touched only by the callback thread
        self.pushed_frames = 0  # written only by the loop thread
        self.taken_frames = 0  # written only by the callback thread

    @property
    def queued_frames(self) -> int:
        """Frames queued and not yet taken (a snapshot: either side may move on)."""
        return self.pushed_frames - self.taken_frames

    def push(self, pcm: Pcm16) -> None:
        self.pushed_frames += len(pcm)
        self._chunks.append(pcm)

    def fill(self, out: npt.NDArray[Any]) -> int:
        """Copy queued mono frames into every channel of `out`; silence after. Returns frames."""
        n = len(out)
        done = 0
        while done < n and self._chunks:
            head = self._chunks[0]
            take = min(n - done, len(head) - self._head_pos)
            out[done : done + take, :] = head[self._head_pos : self._head_pos + take, None]
            done += take
            self._head_pos += take
            if self._head_pos >= len(head):
                self._chunks.popleft()
                self._head_pos = 0
        if done < n:
            out[done:, :] = 0
        self.taken_frames += done
        return done


class Callbacks:
    """Library-independent callback bodies: copy, stamp, hand off. Nothing else."""

    def __init__(
        self,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
        sink: Callable[[Block | StreamEnded], None],
        playout: Playout,
    ) -> None:
        self._now_ns = clock.now_ns
        self._loop = loop
        self._sink = sink
        self._playout = playout
        self._in_frame = 0
        self._out_frame = 0

    def _hand_off(self, item: Block | StreamEnded) -> None:
        try:
            self._loop.call_soon_threadsafe(self._sink, item)
        except RuntimeError:
            pass  # loop closed while the stream was stopping

    def on_input(
        self,
        indata: npt.NDArray[Any],
        adc_s: float,
        current_s: float,
        status: int,
        t_ns: int | None = None,
    ) -> None:
        t = self._now_ns() if t_ns is None else t_ns
        n = len(indata)
        self._hand_off(
            Block(
                "in",
                self._in_frame,
                n,
                t,
                adc_s,
                current_s,
                status,
                pcm=np.array(indata, dtype=np.int16, copy=True),
            )
        )
        self._in_frame += n

    def on_output(
        self,
        outdata: npt.NDArray[Any],
        dac_s: float,
        current_s: float,
        status: int,
        t_ns: int | None = None,
    ) -> None:
        t = self._now_ns() if t_ns is None else t_ns
        n = len(outdata)
        played = self._playout.fill(outdata)
        self._hand_off(
            Block("out", self._out_frame, n, t, dac_s, current_s, status, played_frames=played)
        )
        self._out_frame += n

    def on_duplex(
        self,
        indata: npt.NDArray[Any],
        outdata: npt.NDArray[Any],
        adc_s: float,
        dac_s: float,
        current_s: float,
        status: int,
    ) -> None:
        t = self._now_ns()
        self.on_input(indata, adc_s, current_s, status, t)
        self.on_output(outdata, dac_s, current_s, status, t)

    def on_finished(self, direction: Direction | Literal["duplex"]) -> None:
        self._hand_off(StreamEnded(direction, self._now_ns()))
