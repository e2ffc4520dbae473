"""A rollout's side of its transport: every send under its deadline, the loops that only
listen (receive, clock probes, path samples) and the close, each step bounded.

Why apart from rig.session: the session keeps the lifecycle and the paced send loop; this
keeps what the session awaits on the network and the state that explains it afterwards (what
was in flight and since when, for the cap's reason; whether the peer stopped draining, so
that nothing more is sent to it; the receive loop's error, the root cause of a failed send).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from rig.aio import raise_if_cancelling
from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.core.events import ControlRequest, DownAudio, DownTrack, Received
from rig.core.listener import Listener, Output
from rig.core.metrics import Outcome
from rig.core.records import EventRecord, TrackAudio
from rig.core.sessionconfig import SessionConfig
from rig.core.units import NS_PER_S
from rig.core.uplink import Frame
from rig.errors import DeadlineError, RigError, TransportError
from rig.recordings.sink import RolloutSink
from rig.sendwatch import SendWatch
from rig.transports.base import Transport

#: the wall-clock cap ends a rollout `max_s` + this after it started (connect included).
#: The paced loop ends by itself `max_s` after the first frame; the cap catches anything
#: stuck outside it (a connect, a handshake, a send, a control message)
CAP_GRACE_S = 1.0
T = TypeVar("T")
CANCELLED = ("cancelled", "the rollout was cancelled (the run stopped)")


class Link:
    def __init__(
        self,
        transport: Transport,
        clock: Clock,
        cfg: SessionConfig,
        sink: RolloutSink,
        frame_ns: int,
    ) -> None:
        self.transport = transport
        self.clock = clock
        self.cfg = cfg
        self.sink = sink
        #: what the session awaits on the network now, and since when (for the cap's reason)
        self.busy: tuple[str, int | None, int] | None = None
        self.stuck = False  # a deadline passed: the peer is not draining what we send
        self.recv_error: BaseException | None = None
        self._blocked_ns = 0  # time spent in sends since the uplink was last on time
        self.watch = SendWatch(cfg.send_timeout_s)
        self._frame_ns = frame_ns

    # -- sending -----------------------------------------------------------------------

    async def send_audio(self, frame: Frame) -> int:
        """One frame to the transport, within `send_timeout_s`: a send that blocks longer
        (the peer stopped reading and the TCP window is full) ends the rollout `timed_out`;
        the frames due meanwhile are never sent (counted as `unsent_frames`), so nothing
        bursts out later and nothing queues up."""
        self.busy = ("sending audio frame", frame.seq, frame.deadline_ns)
        watch = self.watch  # the deadline: rig.sendwatch (no timer per frame)
        watch.n += 1
        watch.sending = True
        try:
            t_sent = await self.transport.send_audio(frame.pcm, frame.seq, frame.deadline_ns)
        except TransportError:
            await asyncio.sleep(0)  # let the receive loop report a root cause first
            if self.recv_error is not None:
                raise self.recv_error from None
            raise
        finally:
            watch.sending = False
        self.busy = None
        # time spent blocked in sends since the uplink was last on time: a slow-draining
        # peer shows here, a stall of our own loop does not
        if t_sent - frame.deadline_ns <= self._frame_ns:
            self._blocked_ns = 0
        self._blocked_ns += self.clock.now_ns() - t_sent
        return t_sent

    async def raising_root_cause(self, aw: Awaitable[T]) -> T:
        """`aw`, with a transport failure replaced by the receive loop's root cause when it
        has one (as `send_audio` does for its own failures)."""
        try:
            return await aw
        except TransportError:
            await asyncio.sleep(0)  # let the receive loop report a root cause first
            if self.recv_error is not None:
                raise self.recv_error from None
            raise

    def send_audio_now(self, frame: Frame) -> int | None:
        """`send_audio` without waiting, from the clock's tick (rig.sessiontick); None: not
        now (nothing was sent). Nothing can block here, so the send watch only sees it go."""
        return self.send_pcm_now(frame.pcm, frame.seq, frame.deadline_ns)

    def send_pcm_now(self, pcm: Pcm16, seq: int, deadline_ns: int) -> int | None:
        """`send_audio_now` of a frame's parts (the tick's plain frames have no `Frame`)."""
        t_sent = self.transport.send_audio_now(pcm, seq, deadline_ns)
        if t_sent is None:
            return None
        self.watch.n += 1
        if t_sent - deadline_ns <= self._frame_ns:
            self._blocked_ns = 0
        return t_sent

    def behind(self, t_sent: int, deadline_ns: int, behind_ns: int) -> bool:
        """Do sends drain slower than real time (better stop here than burst later)?"""
        return t_sent - deadline_ns > behind_ns and self._blocked_ns > behind_ns // 2

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        """A control message to the transport, within `send_timeout_s`."""
        self.busy = (f"sending {kind!r}", None, self.clock.now_ns())
        timeout = asyncio.timeout(self.cfg.send_timeout_s)
        try:
            async with timeout:
                await self.transport.send_event(kind, data)
        except TimeoutError:
            if not timeout.expired():
                raise
            raise DeadlineError(
                f"send of {kind!r} blocked {self.cfg.send_timeout_s:g} s: peer stopped reading"
            ) from None
        self.busy = None

    async def emit(self, outputs: Iterable[Output]) -> None:
        """Records to the sink, control requests to the system (each logged as it goes:
        a dialect or transport with no use for a kind sends nothing)."""
        for out in outputs:
            if isinstance(out, ControlRequest):
                data = out.data
                self.sink.put(EventRecord(f"control.{out.kind}", self.clock.now_ns(), data))
                await self.send_event(out.kind, data)
            else:
                self.sink.put(out)

    def outcome_of(
        self, exc: BaseException, task: asyncio.Task[Any], cap: asyncio.Timeout, t_open: int
    ) -> tuple[Outcome, bool]:
        """What ended the stream, from what came out of the send loop; True when the rollout
        itself was cancelled (the session closes, then passes the cancel on)."""
        if isinstance(exc, asyncio.CancelledError):
            if self.watch.fired is not None and task.cancelling():
                task.uncancel()  # our own watchdog: a send blocked past its deadline
                self.stuck = True
                return Outcome.of_error(DeadlineError(self.watch.fired)), False
            if task.cancelling():
                return Outcome(*CANCELLED), True
            # a stray CancelledError out of a transport (e.g. its own deadline)
            return Outcome("error", f"CancelledError out of the transport: {exc}"), False
        if isinstance(exc, TimeoutError) and cap.expired():
            exc = DeadlineError(self.cap_reason(t_open))
        self.stuck = isinstance(exc, DeadlineError)
        outcome = Outcome.of_error(exc)
        if not isinstance(exc, RigError):
            why = {"reason": outcome.reason, "error_type": type(exc).__name__}
            self.sink.put(EventRecord("session.error", self.clock.now_ns(), why))
        return outcome, False

    def send_blocked_reason(self) -> str:
        seq = self.busy[1] if self.busy is not None else None
        return (
            f"send blocked {self.cfg.send_timeout_s:g} s: peer stopped reading (audio frame {seq})"
        )

    def cap_reason(self, t_open_ns: int) -> str:
        """What the wall-clock cap interrupted, for the rollout's reason."""
        what = "waiting for the next frame's deadline"
        if self.busy is not None:
            kind, seq, since_ns = self.busy
            late_s = (self.clock.now_ns() - since_ns) / NS_PER_S
            what = (
                f"{kind} for {late_s:.1f} s"
                if seq is None
                else f"{kind} {seq}, due {late_s:.1f} s ago"
            )
        return f"wall-clock cap of {self.cfg.max_s:g} s (+{CAP_GRACE_S:g} s) reached while {what}"

    # -- the loops that only listen ----------------------------------------------------

    async def receive_loop(self, listener: Listener) -> None:
        sink = self.sink

        def handle(item: Received) -> None:
            if isinstance(item, DownAudio):
                sink.put_all(listener.on_audio(item))
            elif isinstance(item, DownTrack):  # system_raw.wav: rig.transports.deviceecho
                sink.put(TrackAudio(item.name, item.sample_rate, item.pcm))
            else:
                sink.put_all(listener.on_event(item))

        try:
            await self.transport.receive_into(handle)
        except asyncio.CancelledError:
            raise
        except RigError as exc:
            self.recv_error = exc
            why = {"reason": str(exc), "error_type": type(exc).__name__}
            self.sink.put(EventRecord("transport.error", self.clock.now_ns(), why))
        except Exception as exc:  # noqa: BLE001 - recorded as a rollout error, not a crash
            self.recv_error = exc
            why = {"reason": f"{type(exc).__name__}: {exc}"}
            self.sink.put(EventRecord("session.error", self.clock.now_ns(), why))

    async def probe_loop(self) -> None:
        """Clock probes (four-timestamp exchanges) for peers that answer them."""
        interval_ns = round(self.cfg.probe_interval_s * NS_PER_S)
        k = 0
        while True:
            await self.clock.sleep_until(self.clock.now_ns() + interval_ns)
            with contextlib.suppress(RigError):
                await self.send_event("probe", {"id": k})
            k += 1

    async def path_loop(self, listener: Listener) -> None:
        """Round trips and send backlog through the whole session (rig.net.pathsample): a
        ping and a syscall per interval, never in the send loop's way."""
        interval_ns = round(self.cfg.path_interval_s * NS_PER_S)
        while True:
            t_start = self.clock.now_ns()
            try:
                items = await self.transport.sample_path()
            except RigError:
                items = []
            raise_if_cancelling()  # a cancel an await inside lost: the session is closing
            for item in items:
                self.sink.put_all(listener.on_event(item))
            await self.clock.sleep_until(t_start + interval_ns)

    def describe_transport(self) -> dict[str, Any]:
        try:
            return self.transport.describe()
        except Exception as exc:  # noqa: BLE001 - a description must not end a rollout
            return {"error": f"{type(exc).__name__}: {exc}"}

    # -- closing -----------------------------------------------------------------------

    async def close_connection(
        self, recv: asyncio.Task[None], probe: asyncio.Task[None] | None, status: str
    ) -> None:
        """End the conversation, each step under its own deadline: `end` (unless the peer is
        stuck: a send could only block again), the receive loop, the transport."""
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await probe
        if self.cfg.send_end and not self.stuck and status in ("running", "ok", "timed_out"):
            try:
                await self.send_event("end", {})
            except Exception as exc:  # noqa: BLE001 - the rollout already has its status
                why = {"reason": f"end not sent: {exc}", "error_type": type(exc).__name__}
                self.sink.put(EventRecord("transport.error", self.clock.now_ns(), why))
        recv.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await recv
        await self.close_transport()

    async def close_transport(self) -> None:
        try:
            async with asyncio.timeout(self.cfg.close_timeout_s):
                await self.transport.close()
        except Exception as exc:  # noqa: BLE001 - closing must not lose the rollout
            if isinstance(exc, TimeoutError):
                reason = f"close blocked {self.cfg.close_timeout_s:g} s"
            else:
                reason = f"close failed: {type(exc).__name__}: {exc}"
            why = {"reason": reason, "error_type": type(exc).__name__}
            self.sink.put(EventRecord("transport.close_error", self.clock.now_ns(), why))
