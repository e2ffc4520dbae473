"""WebSocket transport: the `websockets` library plus a sans-I/O dialect.

Arrival stamps: the connection classes of rig.transports.wsstamps (the loop's stamp at each
read, or the kernel's where it can take it: rig.transports.kstamp).
"""

from __future__ import annotations

import array
import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import (
    ConnectionClosed,
    ConnectionClosedOK,
    InvalidHandshake,
    InvalidURI,
)
from websockets.uri import parse_uri

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock, MonotonicClock
from rig.core.events import DownAudio, DownEvent, Incoming, Received
from rig.dialects.base import Dialect
from rig.errors import DeadlineError, ProtocolError, TransportError
from rig.net.pathsample import PathSampler
from rig.redact import is_credential_header, redact_text, redact_url
from rig.transports import wsdirect
from rig.transports.base import Transport
from rig.transports.wssend import (
    can_write_now,
    ping_now,
    send_message,
    write_binary_now,
    write_now,
)
from rig.transports.wsstamps import (
    ArrivalStamps,
    StampedConnection,
    StampedServerConnection,
    StampStats,
    frame_bytes,
    stamping,
)


class SafeConnect(connect):
    """websockets' `connect`, but a redirect to another origin (scheme, host or port) drops
    every credential header (rig.redact.is_credential_header), not only the ones websockets
    knows (Authorization, Cookie): API-key headers such as `x-goog-api-key` included."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        old = self.ws_uri
        result = super().process_redirect(exc)
        if isinstance(result, str) and self.additional_headers is not None:
            new = parse_uri(result)
            if (old.secure, old.host, old.port) != (new.secure, new.host, new.port):
                self.additional_headers = Headers(
                    (k, v)
                    for k, v in Headers(self.additional_headers).raw_items()
                    if not is_credential_header(k)
                )
        return result


class WebSocketTransport(Transport):
    """One WebSocket connection to a system, framed by a dialect."""

    sends_now = True

    #: messages may go out faster than real time (fast prefill): the server buffers them
    faster_than_real_time = True
    #: ping/pong round trips and TCP_INFO through the session (rig.net.pathsample)
    samples_path = True

    def __init__(
        self,
        url: str,
        dialect: Dialect,
        clock: Clock,
        *,
        connect_timeout_s: float = 10.0,
        ready_timeout_s: float = 10.0,
        open_gate: asyncio.Semaphore | None = None,
        retries: int = 2,
        retry_backoff_s: float = 0.5,
        max_message_bytes: int = 16 << 20,
        send_timeout_s: float = 2.0,
        close_timeout_s: float = 2.0,
        connect_via: tuple[str, int] | None = None,
        kernel_stamps: bool = True,
    ) -> None:
        self.url = url
        self.dialect = dialect
        self.clock = clock
        self.uplink_rate = dialect.uplink_rate
        self.connect_timeout_s = connect_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.open_gate = open_gate
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.max_message_bytes = max_message_bytes
        #: a send the peer does not drain within this (it stopped reading) is a DeadlineError;
        #: the session puts the same deadline on audio and control messages
        self.send_timeout_s = send_timeout_s
        self.close_timeout_s = close_timeout_s
        #: TCP address to connect to instead of the URL's (an impairment relay, rig.relay.process);
        #: the URL, Host header and TLS name stay the target's
        self.connect_via = connect_via
        #: arrival stamps from the kernel where it can (False: the loop's, always)
        self.kernel_stamps = kernel_stamps
        self._ws: StampedConnection | None = None
        self._pending: list[Incoming] = []
        #: were messages handed over inside data_received (receive_into)?
        self.direct = False
        self._opened = False
        self.connect_attempts = 0
        self._sampler: PathSampler | None = None
        #: stamps of exact messages, and of inexact ones that carried audio (exact_stamps)
        self._exact_ns = array.array("q")  # 8 bytes a stamp: a long rollout keeps many
        self._inexact_audio_ns: set[int] = set()

    async def open(self) -> None:
        """Connect (retrying only before any audio flowed) and wait for the dialect's handshake."""
        if self._opened:
            raise TransportError("a transport opens one session only; never a second one mid-run")
        self._opened = True
        last_exc: Exception | None = None
        for attempt in range(self.retries + 1):
            self.connect_attempts = attempt + 1
            try:
                if self.open_gate is not None:
                    async with self.open_gate:
                        await self._connect()
                else:
                    await self._connect()
                break
            except InvalidURI as exc:  # the URL itself: retrying cannot help
                raise TransportError(
                    f"invalid URI {redact_url(self.url)}: {redact_text(exc.msg)}"
                ) from None
            except ValueError as exc:  # e.g. a redirect websockets will not follow
                raise TransportError(
                    f"cannot connect to {redact_url(self.url)}: {redact_text(str(exc))}"
                ) from None
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                last_exc = exc
                if attempt < self.retries:
                    await asyncio.sleep(self.retry_backoff_s * (2**attempt))
        else:
            raise TransportError(
                f"could not connect to {redact_url(self.url)} after {self.retries + 1} attempts: "
                f"{type(last_exc).__name__}: {redact_text(str(last_exc))}"
            )
        await self._handshake()

    async def _connect(self) -> None:
        via: dict[str, Any] = {}
        if self.connect_via is not None:
            via = {"host": self.connect_via[0], "port": self.connect_via[1], "proxy": None}
        async with asyncio.timeout(self.connect_timeout_s + 1):
            self._ws = await SafeConnect(  # type: ignore[assignment]
                self.url,
                additional_headers=self.dialect.headers() or None,
                create_connection=stamping(StampedConnection, self.clock),
                max_size=self.max_message_bytes,
                open_timeout=self.connect_timeout_s,
                ping_interval=None,
                compression=None,
                **via,
            )
        if self.kernel_stamps and isinstance(self.clock, MonotonicClock):  # fake: fake times
            self._ws.kernel_stamps()  # type: ignore[union-attr]

    async def _handshake(self) -> None:
        ws = self._require()
        try:
            async with asyncio.timeout(self.send_timeout_s):
                for msg in self.dialect.open_messages():
                    await ws.send(msg)
        except TimeoutError:
            why = f"handshake send blocked {self.send_timeout_s:g} s: peer stopped reading"
            raise DeadlineError(why) from None
        try:
            async with asyncio.timeout(self.ready_timeout_s):  # a real-time limit, not a stamp
                while not self.dialect.ready:
                    try:
                        message = await ws.recv()
                    except ConnectionClosed as exc:
                        why = f"closed during handshake: {redact_text(str(exc))}"
                        raise TransportError(why, code=_code(exc)) from exc
                    t_ns, exact = self._stamp_of(ws)
                    items = self.dialect.decode(message, t_ns)
                    self._note_exact(t_ns, exact, items)
                    self._pending.extend(items)
                    await self._flush_outgoing(ws)
        except TimeoutError:
            raise TransportError(f"no handshake answer within {self.ready_timeout_s} s") from None

    async def _flush_outgoing(self, ws: StampedConnection) -> None:
        """Send what the dialect wants to say in answer to what it decoded (e.g. Grok's
        `response.create` once the server confirmed the commit)."""
        outgoing = self.dialect.take_outgoing()
        if not outgoing:  # the common case: no timeout armed per received message
            return
        try:
            async with asyncio.timeout(self.send_timeout_s):
                for msg in outgoing:
                    await send_message(ws, msg)
        except TimeoutError:
            why = f"send of an answer blocked {self.send_timeout_s:g} s: peer stopped reading"
            raise DeadlineError(why) from None
        except ConnectionClosed as exc:
            raise TransportError(
                f"closed while answering: {redact_text(str(exc))}", code=_code(exc)
            ) from exc

    def _require(self) -> StampedConnection:
        if self._ws is None:
            raise TransportError("not connected")
        return self._ws

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        ws = self._require()
        t_ns = self.clock.now_ns()
        try:
            for msg in self.dialect.encode_audio(pcm, seq, t_sched_ns, t_ns):
                await send_message(ws, msg)
        except ConnectionClosed as exc:
            raise TransportError(
                f"closed while sending: {redact_text(str(exc))}", code=_code(exc)
            ) from exc
        return t_ns

    def send_audio_now(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int | None:
        ws = self._ws
        if ws is None or not can_write_now(ws):
            return None
        t_ns = self.clock.now_ns()
        messages = self.dialect.encode_audio(pcm, seq, t_sched_ns, t_ns)
        try:
            if not (
                len(messages) == 1
                and isinstance(messages[0], bytes)
                and write_binary_now(ws, messages[0])
            ):
                write_now(ws, messages)
        except ConnectionClosed as exc:
            raise _closed_now(exc, "closed while sending") from exc
        return t_ns

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        ws = self._require()
        try:
            for msg in self.dialect.encode_event(kind, data, self.clock.now_ns()):
                await send_message(ws, msg)
        except ConnectionClosed as exc:
            raise TransportError(
                f"closed while sending {kind}: {redact_text(str(exc))}", code=_code(exc)
            ) from exc

    def send_event_now(self, kind: str, data: dict[str, Any]) -> bool:
        ws = self._ws
        if ws is None or not can_write_now(ws):
            return False
        try:
            write_now(ws, self.dialect.encode_event(kind, data, self.clock.now_ns()))
        except ConnectionClosed as exc:
            raise _closed_now(exc, f"closed while sending {kind}") from exc
        return True

    def _path_sampler(self) -> PathSampler | None:
        ws = self._ws
        if ws is None:
            return None
        if self._sampler is None:
            self._sampler = PathSampler(ws, self.clock, ping_now=functools.partial(ping_now, ws))
            ws.on_pong = self._sampler.pong
        return self._sampler

    async def sample_path(self) -> list[DownEvent]:
        """One ping round trip and the TCP state (`net.rtt`, `net.tcp`; rig.net.pathsample)."""
        sampler = self._path_sampler()
        return [] if sampler is None else await sampler.sample()

    def sample_path_now(self, emit: Callable[[list[DownEvent]], None]) -> bool:
        sampler = self._path_sampler()
        return sampler is not None and sampler.sample_now(emit)

    async def path_round_trip(self) -> list[DownEvent]:
        sampler = self._path_sampler()
        return [] if sampler is None else await sampler.round_trip()

    async def receive(self) -> AsyncIterator[Incoming]:
        ws = self._require()
        for item in self._pending:
            yield item
        self._pending.clear()
        while True:
            try:
                message = await ws.recv()
            except ConnectionClosedOK:
                yield DownEvent("transport.closed", self.clock.now_ns(), {"clean": True})
                return
            except ConnectionClosed as exc:
                raise TransportError(
                    f"connection lost mid-stream: {redact_text(str(exc))}", code=_code(exc)
                ) from exc
            t_ns, exact = self._stamp_of(ws)
            try:
                items = self.dialect.decode(message, t_ns)
            except ProtocolError:
                raise
            except (ValueError, KeyError, TypeError) as exc:
                raise ProtocolError(f"undecodable message: {exc}", str(message)[:200]) from exc
            self._note_exact(t_ns, exact, items)
            await self._flush_outgoing(ws)
            for item in items:
                yield item

    async def receive_into(self, handle: Callable[[Received], None]) -> None:
        """`receive()` without a task step per message where nothing can differ: a dialect
        that never answers what it decodes (no `take_outgoing` of its own) gets every data
        message decoded and handed to `handle` inside the socket's `data_received`
        (rig.transports.wsdirect), with the same arrival stamp, the same errors and the same
        end as `receive()`. Anything else (an answering dialect, a subclass with its own
        `receive()`, a message already waiting in websockets' queue) goes the awaited way."""
        ws = self._require()
        answers = type(self.dialect).take_outgoing is not Dialect.take_outgoing
        # a subclass that reads through its own receive() (a wrapper, a fault injector)
        # gets exactly that: the direct path would go around it
        own_receive = type(self).receive is not WebSocketTransport.receive
        if answers or own_receive or not wsdirect.switch(ws, self._direct_handler(ws, handle)):
            async for item in self.receive():
                handle(item)
            return
        self.direct = True
        # what the handshake decoded goes first: nothing the switch hands over can come in
        # before this loop callback ends
        pending, self._pending = self._pending, []
        try:
            for item in pending:
                handle(item)
        except BaseException:
            wsdirect.stop(ws)  # the reader ends here, as it would have
            raise
        await wsdirect.until_closed(ws)
        exc = ws.protocol.close_exc
        if isinstance(exc, ConnectionClosedOK):
            handle(DownEvent("transport.closed", self.clock.now_ns(), {"clean": True}))
            return
        raise TransportError(
            f"connection lost mid-stream: {redact_text(str(exc))}", code=_code(exc)
        ) from exc

    def _direct_handler(
        self, ws: StampedConnection, handle: Callable[[Received], None]
    ) -> Callable[[str | bytes], None]:
        decode, stamps, now_ns = self.dialect.decode, ws.stamps, self.clock.now_ns
        flags, keep_exact, note = ws.exact, self._exact_ns.append, self._note_exact

        def on_message(message: str | bytes) -> None:
            if stamps:
                t_ns, exact = stamps.popleft(), flags.popleft()
            else:
                t_ns, exact = now_ns(), False
            try:
                items = decode(message, t_ns)
            except ProtocolError:
                raise
            except (ValueError, KeyError, TypeError) as exc:
                raise ProtocolError(f"undecodable message: {exc}", str(message)[:200]) from exc
            if exact:
                keep_exact(t_ns)
            else:
                note(t_ns, exact, items)
            for item in items:
                handle(item)

        return on_message

    async def close(self) -> None:
        """The close handshake within `close_timeout_s`, else drop the TCP connection. A peer
        that stopped reading (our writes are paused on a full window) is dropped at once: a
        close frame could never reach it."""
        ws = self._ws
        if ws is None:
            return
        if ws.paused:
            ws.transport.abort()
            return
        try:
            async with asyncio.timeout(self.close_timeout_s):
                await ws.close()
        except (TimeoutError, ConnectionClosed, OSError):
            ws.transport.abort()

    def _stamp_of(self, ws: StampedConnection) -> tuple[int, bool]:
        """The arrival stamp of the message just read, and whether it is exact."""
        if ws.stamps:
            return ws.stamps.popleft(), ws.exact.popleft()
        return self.clock.now_ns(), False

    def _note_exact(self, t_ns: int, exact: bool, items: list[Incoming]) -> None:
        if exact:
            self._exact_ns.append(t_ns)
        elif any(type(item) is DownAudio for item in items):
            self._inexact_audio_ns.add(t_ns)

    def exact_stamps(self) -> Collection[int]:
        """Stamps of messages the kernel stamped at their own last byte, less any stamp that
        received audio shares with an inexact message (a read's earlier audio carries its
        last message's stamp)."""
        return set(self._exact_ns) - self._inexact_audio_ns

    def finish_metrics(self, metrics: dict[str, Any]) -> None:
        """`arrival_stamps`: how the arrivals were stamped (kernel or loop), how many exactly,
        and the longest a read waited for the loop (measured by the kernel's stamps)."""
        ws = self._ws
        if ws is not None:
            metrics["arrival_stamps"] = ws.kernel.as_dict()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "websocket",
            "url": redact_url(self.url),
            "dialect": self.dialect.describe(),
            "connect_timeout_s": self.connect_timeout_s,
            "ready_timeout_s": self.ready_timeout_s,
            "retries": self.retries,
            "arrival_stamps": "kernel" if self.kernel_stamps else "loop",
            **({"connect_via": list(self.connect_via)} if self.connect_via else {}),
        }


def _code(exc: ConnectionClosed) -> int | None:
    rcvd = exc.rcvd
    return rcvd.code if rcvd is not None else None


def _closed_now(exc: ConnectionClosed, what: str) -> TransportError:
    """The error of a write that found the connection closed: why it closed (the socket's
    error when there was one), redacted."""
    why = exc.__cause__ if exc.__cause__ is not None else exc
    return TransportError(f"{what}: {redact_text(str(why))}", code=_code(exc))


__all__ = [
    "ArrivalStamps",
    "SafeConnect",
    "StampStats",
    "StampedConnection",
    "StampedServerConnection",
    "WebSocketTransport",
    "frame_bytes",
    "redact_url",
    "stamping",
]
