"""`rig sim`: the reference system as a WebSocket server speaking rig-pcm.

A thin asyncio shell around `SimEngine`. Per connection, three tasks:
  uplink    messages wait in a simulated uplink delay line, then reach the engine
  emitter   wakes when a reply chunk is due and hands it to the downlink line
  downlink  messages wait in the downlink delay line, then go to the socket
The server's own clock (`server_ts_ms` on every message) runs at `1 + drift_ppm/1e6` of the
true clock, offset by `clock_offset_ms`. The truth log records what really happened, on the
true shared clock.

Hostile clients: every message is decoded as it comes off the socket, so a bad frame is
answered at once with an `error` message and a 1008 close carrying the reason; the uplink
queue holds at most `max_queue` messages (a flood waits in TCP, not in memory), messages
are at most `max_message_bytes`, and a client that sends no hello within `hello_timeout_s`
is closed with 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rig.audio.pcm import Pcm16
from rig.clock.base import NS_PER_MS, Clock, MonotonicClock, TickClock
from rig.dialects._wire import b64_to_pcm
from rig.errors import ProtocolError
from rig.protocol import rawpcm
from rig.sim.engine import SimConfig, SimEngine, Truth
from rig.sim.hello import parse_hello
from rig.sim.netdelay import DelayLine
from rig.sim.truth import TruthLog
from rig.sim.wsdown import Downlink
from rig.transports import wsdirect


@dataclass(frozen=True, slots=True)
class NetConfig:
    delay_up_ms: float = 0.0
    delay_down_ms: float = 0.0
    jitter_ms: float = 0.0
    clock_offset_ms: float = 0.0
    clock_drift_ppm: float = 0.0
    clock_step_ms: float = 0.0  # the server clock jumps by this much ...
    clock_step_at_s: float = 0.0  # ... this long after the server started
    seed: int = 0
    #: send no server clock at all (no `server_ts_ms`, probes echoed without t1/t2): a peer
    #: like most hosted systems, for testing what the rig measures from round trips alone
    withhold_stamps: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class ServerClock:
    """The sim's own clock: offset, drift and an optional step against the true shared clock."""

    def __init__(
        self,
        epoch_ns: int,
        offset_ms: float,
        drift_ppm: float,
        step_ms: float = 0.0,
        step_at_s: float = 0.0,
    ) -> None:
        self.epoch_ns = epoch_ns
        self.offset_ns = round(offset_ms * NS_PER_MS)
        self.rate = 1.0 + drift_ppm / 1e6
        self.step_ns = round(step_ms * NS_PER_MS)
        self.step_true_ns = epoch_ns + round(step_at_s * 1e9)  # true time of the jump

    def ns(self, t_true_ns: int) -> int:
        step = self.step_ns if self.step_ns and t_true_ns >= self.step_true_ns else 0
        return (
            self.epoch_ns + self.offset_ns + step + round((t_true_ns - self.epoch_ns) * self.rate)
        )

    def ms(self, t_true_ns: int) -> float:
        return round(self.ns(t_true_ns) / NS_PER_MS, 6)


@dataclass
class SimServerState:
    connections: int = 0
    active: int = 0
    errors: list[str] = field(default_factory=list)
    queue_high_water: int = 0  # most uplink messages waiting in one connection


class SimHost:
    """What every shell of the reference system shares: its knobs, its own clock (offset and
    drift against the true clock), the truth log, connection numbering and counters."""

    def __init__(
        self,
        cfg: SimConfig,
        net: NetConfig | None = None,
        *,
        truth_log: str | None = None,
        reply_audio: Pcm16 | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.cfg = cfg.effective()  # what the policy forces, as the truth log says
        self.net = net or NetConfig()
        self.clock = clock or MonotonicClock()
        self.truth = TruthLog(truth_log)
        self.reply_audio = reply_audio
        self.server_clock = ServerClock(
            self.clock.now_ns(),
            self.net.clock_offset_ms,
            self.net.clock_drift_ppm,
            self.net.clock_step_ms,
            self.net.clock_step_at_s,
        )
        self.state = SimServerState()
        self._ids = itertools.count(1)
        self.port = 0

    def log_start(self, host: str, **extra: Any) -> None:
        self.truth.write(
            "server_start",
            self.clock.now_ns(),
            config=self.cfg.as_dict(),
            net=self.net.as_dict(),
            host=host,
            port=self.port,
            **extra,
            server_clock_epoch_ns=self.server_clock.epoch_ns,
        )


class SimServer(SimHost):
    """The reference system over WebSocket (rig-pcm)."""

    _server: Server | None = None

    def __init__(
        self,
        cfg: SimConfig,
        net: NetConfig | None = None,
        *,
        hello_timeout_s: float = 10.0,
        max_queue: int = 256,
        max_message_bytes: int = 1 << 20,
        **kwargs: Any,
    ) -> None:
        super().__init__(cfg, net, **kwargs)
        self.hello_timeout_s = hello_timeout_s
        self.max_queue = max_queue
        self.max_message_bytes = max_message_bytes

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, *, reuse_port: bool = False
    ) -> str:
        """Listen; `reuse_port`: several processes share the port (`rig sim --workers`)."""
        self._server = await serve(
            self._handle,
            host,
            port,
            create_connection=wsdirect.DirectConnection,
            max_size=self.max_message_bytes,
            ping_interval=None,
            compression=None,
            reuse_port=reuse_port or None,
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self.log_start(host)
        return f"ws://{host}:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.truth.close()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def _handle(self, ws: ServerConnection) -> None:
        conn = next(self._ids)
        self.state.connections += 1
        self.state.active += 1
        rng = random.Random(self.net.seed * 1_000_003 + conn)
        up = DelayLine(self.net.delay_up_ms, self.net.jitter_ms, rng)
        down = DelayLine(self.net.delay_down_ms, self.net.jitter_ms, rng)
        session = _Session(self, ws, conn, up, down)
        try:
            await session.run()
        except ProtocolError as exc:
            self.state.errors.append(str(exc))
            with contextlib.suppress(ConnectionClosed):
                await ws.send(rawpcm.encode_text("error", message=str(exc)))
            with contextlib.suppress(ConnectionClosed):
                # a close reason is at most 123 bytes of UTF-8
                await ws.close(1008, str(exc).encode()[:120].decode("utf-8", "ignore"))
        finally:
            self.state.active -= 1
            self.truth.write("conn_close", self.clock.now_ns(), conn=conn)


#: the engine's truths a client is told of: truth -> (message type, field, truth data key)
_TOLD = {
    "speech_start": ("speech_started", "audio_start_ms", "input_ms"),
    "speech_end": ("speech_stopped", "audio_end_ms", "audio_end_input_ms"),
    "reply_cancel": ("response.cancelled", "response", "response"),
}


class _Session:
    def __init__(
        self, server: SimServer, ws: ServerConnection, conn: int, up: DelayLine, down: DelayLine
    ) -> None:
        self.s = server
        self.ws = ws
        self.conn = conn
        self.up_line = up
        self.engine = SimEngine(server.cfg, server.reply_audio)
        self.framing = "rig1"
        self.up_q: asyncio.Queue[tuple[int, int, rawpcm.AudioFrame | dict[str, Any]] | None] = (
            asyncio.Queue(maxsize=server.max_queue)
        )
        self.down = Downlink(ws, down, server.clock, server.max_queue * 64, self._sent)
        self.wake = asyncio.Event()
        self.up_seq = 0
        self.up_held = 0  # messages in the uplink queue or its delay (order: none skip them)

    def now(self) -> int:
        return self.s.clock.now_ns()

    def sms(self, t_ns: int) -> float:
        return self.s.server_clock.ms(t_ns)

    def wire_ms(self, t_ns: int) -> float | None:
        """The server stamp put on the wire: none when the sim withholds its clock."""
        return None if self.s.net.withhold_stamps else self.sms(t_ns)

    async def run(self) -> None:
        try:
            async with asyncio.timeout(self.s.hello_timeout_s):
                first = await self.ws.recv()
        except TimeoutError:
            raise ProtocolError(f"no hello within {self.s.hello_timeout_s:g} s") from None
        hello, self.framing, silence_ms = parse_hello(first, self.s.cfg.sample_rate)
        if silence_ms is not None:  # the client's endpointer setting
            cfg = dataclasses.replace(self.s.cfg, endpoint_silence_ms=silence_ms)
            self.engine = SimEngine(cfg, self.s.reply_audio)
        t = self.now()
        self.s.truth.write("conn_open", t, conn=self.conn, hello=hello)
        await self.ws.send(
            rawpcm.encode_text(
                "ready",
                version=rawpcm.VERSION,
                sample_rate=self.s.cfg.sample_rate,
                server_ts_ms=self.wire_ms(t),
                conn=self.conn,
            )
        )
        workers = [
            asyncio.create_task(self._uplink()),
            asyncio.create_task(self._emitter()),
            asyncio.create_task(self.down.run()),
        ]
        reader = asyncio.create_task(self._read())
        try:
            await asyncio.wait([reader, *workers], return_when=asyncio.FIRST_COMPLETED)
            if reader.done():
                reader.result()  # a bad frame: ProtocolError, answered with a 1008 close
                await asyncio.wait([workers[0]], timeout=5)  # the uplink line drains
            for w in workers:
                if w.done() and not w.cancelled() and w.exception() is not None:
                    raise w.exception()  # type: ignore[misc]
        finally:
            for task in (reader, *workers):
                task.cancel()
            await asyncio.gather(reader, *workers, return_exceptions=True)

    async def _read(self) -> None:
        """Decode each message off the socket (a bad one raises at once), then handle it:
        here, when its delay line has nothing to hold (the common case: no task step and no
        queue per frame, issue #32), else through the queue to `_uplink`. Without an uplink
        delay, as soon as nothing is buffered, inside data_received (rig.sim.wsdirect)."""
        try:
            while self.up_line.active or not wsdirect.switch(self.ws, self._direct):
                message = await self.ws.recv()
                t_wire = self.now()
                decoded = self._decode(message)
                release = self.up_line.release_ns(t_wire)
                if self.up_held == 0 and release <= t_wire:
                    self._arrived(t_wire, decoded)
                    continue
                self.up_held += 1
                await self.up_q.put((release, t_wire, decoded))
                self.s.state.queue_high_water = max(
                    self.s.state.queue_high_water, self.up_q.qsize()
                )
            await wsdirect.until_closed(self.ws)
        except ConnectionClosed:
            pass
        await self.up_q.put(None)

    def _decode(self, message: str | bytes) -> rawpcm.AudioFrame | dict[str, Any]:
        if not isinstance(message, bytes):
            return rawpcm.decode_text(message)
        frame = rawpcm.decode_audio(message, self.framing, self.up_seq)
        self.up_seq += 1
        return frame

    def _direct(self, message: str | bytes) -> None:  # no uplink delay: nothing is held
        self._arrived(self.now(), self._decode(message))

    async def _uplink(self) -> None:
        while True:
            item = await self.up_q.get()
            if item is None:
                return
            release, t_wire, message = item
            if release > self.now():
                await self.s.clock.sleep_until(release)
            self._arrived(t_wire, message)
            self.up_held -= 1

    def _arrived(self, t_wire: int, message: rawpcm.AudioFrame | dict[str, Any]) -> None:
        """A message out of the uplink's delay line: to the engine (audio) or answered."""
        t = self.now()
        if isinstance(message, rawpcm.AudioFrame):
            frame = message
            if self.s.truth.enabled:  # no record built for no log: per chunk, per connection
                self.s.truth.write(
                    "recv_chunk",
                    t,
                    conn=self.conn,
                    seq=frame.seq,
                    n_samples=int(frame.pcm.size),
                    t_wire_ns=t_wire,
                    client_ts_ms=frame.ts_ms,
                    server_ts_ms=self.sms(t),
                )
            for truth in self.engine.on_audio(frame.pcm, t):
                self._on_truth(truth)
            if self.engine.next_due_ns() is not None:  # the emitter waits only for a reply:
                self.wake.set()  # not a task step per chunk
        else:
            self._on_text(message, t)

    def _on_text(self, msg: dict[str, Any], t: int) -> None:
        kind = msg["type"]
        if kind == "probe":
            t1 = self.s.server_clock.ns(t)
            self.s.truth.write("probe", t, conn=self.conn, id=msg.get("id"))
            # t2 is stamped as the reply enters the simulated downlink, like `server_ts_ms` on
            # audio: the delay lines are the network, so their time belongs to the path (a t2
            # read after the line would hide the downlink delay inside the server's hold).
            t2 = self.s.server_clock.ns(self.now())
            stamps = {} if self.s.net.withhold_stamps else {"t1_server_ns": t1, "t2_server_ns": t2}
            reply = rawpcm.encode_text(
                "probe_reply", id=msg.get("id"), t0_ns=msg.get("t0_ns"), **stamps
            )
            self.down.send_later(self.now(), lambda: reply)
        elif kind == "end":
            self.s.truth.write("client_end", t, conn=self.conn)
        elif kind == "own_audio":  # a two-channel prefill: the system's own past track
            own = b64_to_pcm(msg.get("audio"))
            self.s.truth.write(
                "own_audio",
                t,
                conn=self.conn,
                seq=msg.get("seq"),
                start_sample=msg.get("start_sample"),
                n_samples=int(own.size),
            )
        else:
            self.s.truth.write("unknown_text", t, conn=self.conn, type=kind)

    def _on_truth(self, truth: Truth) -> None:
        self.s.truth.write(
            truth.event, truth.t_ns, conn=self.conn, server_ts_ms=self.sms(truth.t_ns), **truth.data
        )
        told = _TOLD.get(truth.event)
        if told is not None:
            kind, key, src = told
            t = truth.t_ns
            self._send_text_later(t, kind, server_ts_ms=self.wire_ms(t), **{key: truth.data[src]})

    def _send_text_later(self, t_ns: int, kind: str, **fields: Any) -> None:
        if fields.get("server_ts_ms", 0) is None:  # withheld clock: no key at all
            del fields["server_ts_ms"]
        msg = rawpcm.encode_text(kind, **fields)
        self.down.send_later(t_ns, lambda: msg)

    def _sent(self, truth: dict[str, Any] | None) -> None:
        if truth is not None:
            event = truth.pop("event")
            pcm = truth.pop("_pcm", None)
            if pcm is not None:
                self.engine.said(self.now(), pcm)
            self.s.truth.write(event, self.now(), conn=self.conn, **truth)

    async def _emitter(self) -> None:
        """Reply chunks at their due times: from the clock's shared tick where it has one
        (every connection's due chunks from one timer wake-up, no task step per chunk)."""
        clock = self.s.clock
        while True:
            due = self.engine.next_due_ns()
            if due is None:
                self.wake.clear()
                await self.wake.wait()
                continue
            if isinstance(clock, TickClock):
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                handle = clock.call_at(due, functools.partial(self._emit_tick, done))
                if handle is not None:
                    try:
                        await done  # until the engine has nothing more due
                    finally:
                        handle.cancel()
                    continue
            await clock.sleep_until(due)
            self._emit_due()

    def _emit_tick(self, done: asyncio.Future[None], _deadline: int) -> int | None:
        if done.done():  # the emitter was cancelled: its `finally` has not run yet
            return None
        try:
            self._emit_due()
        except Exception as exc:  # noqa: BLE001 - raised in the emitter task, as before
            done.set_exception(exc)
            return None
        nxt = self.engine.next_due_ns()
        if nxt is None or nxt <= _deadline:  # nothing due, or no progress: back to the task
            done.set_result(None)
            return None
        return nxt

    def _emit_due(self) -> None:
        """Everything the engine has due now: truth records, replies into the downlink."""
        emits, truths = self.engine.poll(self.now())
        for truth in truths:
            self.s.truth.write(
                truth.event,
                truth.t_ns,
                conn=self.conn,
                server_ts_ms=self.sms(truth.t_ns),
                **truth.data,
            )
            if truth.event == "reply_start":
                self._send_text_later(
                    truth.t_ns,
                    "response.start",
                    server_ts_ms=self.wire_ms(truth.t_ns),
                    response=truth.data["response"],
                )
            elif truth.event == "reply_cancel":  # a delayed yield (yield_after_ms)
                self._send_text_later(
                    truth.t_ns,
                    "response.cancelled",
                    server_ts_ms=self.sms(truth.t_ns),
                    response=truth.data["response"],
                )
        for e in emits:
            data = rawpcm.encode_audio(e.pcm, e.seq, self.wire_ms(e.t_ns), self.framing)
            self.down.send_later(
                e.t_ns,
                _const(data),
                {
                    "event": "reply_chunk",
                    "seq": e.seq,
                    "n_samples": int(e.pcm.size),
                    "emit_ns": e.t_ns,
                    "server_ts_ms": self.sms(e.t_ns),
                    "response": e.response,
                    "loud": bool(np.any(e.pcm)),
                    "_pcm": e.pcm,  # for the engine's own echo canceller, not logged
                },
            )
        for truth in truths:
            if truth.event == "reply_end":
                self._send_text_later(
                    truth.t_ns,
                    "response.end",
                    server_ts_ms=self.wire_ms(truth.t_ns),
                    response=truth.data["response"],
                )


def _const(data: bytes) -> Callable[[], str | bytes]:
    return lambda: data
