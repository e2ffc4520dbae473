"""The uplink's fast path: frames sent from the clock's tick, not from a task per stream.

Why: a send loop that sleeps until each deadline costs one timer wake-up, one future and one
task step per stream per frame (about 70 µs a frame on a 2-core VM, docs/pacing.md); with
100 streams that alone is a third of a core. The clock's tick (rig.clock.timer, "Ticks")
wakes once for every stream due at that instant and calls each stream's `serve` there.

How this works: the session's send loop hands its stream to `Tick.run()`. At each deadline
`serve` does, synchronously, what the loop would do for a frame: notes the wake-up's lag,
asks the uplink for the frame (the listener's view at the deadline), applies the echo path,
sends it through the transport's non-waiting path (`send_audio_now`, its own clock read for
`t_ns`), hands the records to the sink, releases the playback queue, and asks to be called
at the next deadline. Every frame is still stamped and judged on its own. Anything that
needs an await hands the stream back to the loop with what is already done (`Handback`),
and the loop finishes that frame the slow way, exactly as before: a control message
before or after the audio, a barge-in to announce, a socket that cannot take the frame now
(then the loop's `send_audio` waits under the same send deadline), the end of the script,
the cap, or the receive loop having ended. An exception (a failed send, the uplink falling
behind) goes to the loop as if its own send had raised it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from rig.audio.pcm import Pcm16
from rig.clock.base import TickClock
from rig.clock.timer import TickHandle
from rig.core.listener import Listener
from rig.core.loopmonitor import LoopMonitor
from rig.core.metrics import Outcome
from rig.core.uplink import Frame, Uplink
from rig.echo.path import EchoPath
from rig.recordings.sink import RolloutSink
from rig.sessionlink import Link


@dataclass(slots=True)
class Handback:
    """What the tick leaves the send loop to do for the current frame."""

    frame: Frame | None = None  # None: nothing done for it yet
    t_sent: int | None = None  # the audio went out: only what follows it is left
    barge_ins: list[tuple[int, int]] = field(default_factory=list)
    outcome: Outcome | None = None  # the script is over


@dataclass(frozen=True, slots=True)
class Parts:
    """The session's pieces a frame goes through (rig.session builds it)."""

    uplink: Uplink
    listener: Listener
    link: Link
    sink: RolloutSink
    monitor: LoopMonitor  # the loop's wake-up lags (rig.core.selfcheck)
    echo: EchoPath | None


class Tick:
    """Serves one session's frames from its clock's tick until one needs the send loop."""

    def __init__(
        self,
        parts: Parts,
        clock: TickClock,
        recv: asyncio.Task[None],
        cap_ns: int,
        sent: Callable[[Frame, int], list[tuple[int, int]]],
        sent_pcm: Callable[[int, int, Pcm16, int, Pcm16 | None], None] | None = None,
    ) -> None:
        self.s = parts
        self.clock = clock
        self.recv = recv
        self.cap_ns = cap_ns
        self._sent = sent  # records of a sent frame to the sink; its barge-ins
        #: the same for a plain frame (`Uplink.plain_pcm`) by its parts; None: every frame
        #: takes the general path (an echo path changes frames)
        self._sent_pcm = sent_pcm if parts.echo is None else None
        self._fut: asyncio.Future[Handback] | None = None
        self._early = True  # was the tick armed before the deadline it is called for?
        self.frames = 0  # frames sent from the tick (the rest went the slow way)

    async def run(self) -> Handback | None:
        """Frames from the tick until one is handed back; None: this clock has no tick."""
        uplink = self.s.uplink
        deadline = uplink.pacer.deadline_ns(uplink.next_seq)
        self._early = self.s.link.clock.now_ns() < deadline
        fut: asyncio.Future[Handback] = asyncio.get_running_loop().create_future()
        self._fut = fut
        handle: TickHandle | None = self.clock.call_at(deadline, self.serve)
        if handle is None:
            return None
        try:
            return await fut
        finally:
            handle.cancel()  # cancelled (the cap, the run stopping): no frame after this

    def _back(self, back: Handback) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(back)

    def _after(self, t_sent: int) -> int:
        """A frame went out whole: the playback it released; the next deadline."""
        s = self.s
        released = s.listener.release(t_sent)
        if released:
            s.sink.put_all(released)
        pacer = s.uplink.pacer
        nxt = pacer.deadline_ns(pacer.next_seq)
        self._early = s.link.clock.now_ns() < nxt
        return nxt

    def serve(self, deadline: int) -> int | None:
        """One frame at its deadline; the next deadline, or None when handed back."""
        s = self.s
        uplink, listener, clock = s.uplink, s.listener, s.link.clock
        fut = self._fut
        if fut is None or fut.done():
            return None
        try:
            now = clock.now_ns()
            if self._early:  # a timer wake-up: how late it came is the loop's lag
                s.monitor.frame_woke(deadline, now)
            if deadline >= self.cap_ns or self.recv.done():
                self._back(Handback())
                return None
            obs = listener.observe(deadline)
            sent_pcm = self._sent_pcm
            pcm = None if sent_pcm is None else uplink.plain_pcm()
            if pcm is not None and sent_pcm is not None:  # most frames: no Frame, no marks
                uplink.last_obs = obs
                seq = uplink.pacer.next_seq
                clean = uplink.plain_clean
                t_sent = s.link.send_pcm_now(pcm, seq, deadline)
                if t_sent is None:
                    self._back(Handback(Frame(seq, deadline, pcm, (), clean=clean)))
                    return None
                self.frames += 1
                sent_pcm(seq, deadline, pcm, t_sent, clean)
                return self._after(t_sent)
            frame = uplink.next_frame(obs)
            if frame is None:
                self._back(Handback(outcome=Outcome("ok")))
                return None
            if s.echo is not None:
                frame = s.echo.on_frame(frame, listener, deadline)
            if frame.before:
                self._back(Handback(frame))
                return None
            t_sent = s.link.send_audio_now(frame)
            if t_sent is None:
                self._back(Handback(frame))
                return None
            self.frames += 1
            barge_ins = self._sent(frame, t_sent)
            if barge_ins or frame.after:
                self._back(Handback(frame, t_sent, barge_ins))
                return None
            return self._after(t_sent)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - the loop raises it as its own (even a
            fut.set_exception(exc)  # stray CancelledError, as an awaited send would)
            return None
