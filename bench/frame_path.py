"""The uplink's per-frame Python, without a socket: µs per frame of each piece (docs/pacing.md).

What `Tick.serve` does for one frame besides the socket write, on the real objects: the
listener's observation, the director's frame (`Uplink.next_frame`), the WebSocket framing
into a transport that keeps nothing (`write_now` through websockets' protocol), the frame's
records (`Uplink.sent`) and their hand-off to the writer's queue (`RolloutSink.put_all`; the
queue is drained by nobody but this script, so the writer thread's own work is not in it),
the playback release. One process, one thread, a fake clock: the figures are CPU of the
code, not of the machine's wake-ups, so two versions of the code compare within a few %.

`--path plain` times the tick's path for most frames instead (rig.sessiontick): the frame's
samples from `Uplink.plain_pcm` (no `Frame`), the send as `WebSocketTransport.send_audio_now`
makes it (`write_binary_now` straight to the transport), `Uplink.sent_plain_seq` and the
one-tuple hand-off `RolloutSink.up_frame`.

    python bench/frame_path.py [--streams 100] [--frames 300] [--repeat 5] [--path plain]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.client import ClientProtocol
from websockets.uri import parse_uri

from rig.audio.source import tone
from rig.core.director import Play
from rig.core.listener import Listener
from rig.core.pacer import Pacer, PacerConfig
from rig.core.uplink import Uplink
from rig.dialects.rawpcm import RawPcmDialect
from rig.recordings.sink import RolloutSink
from rig.recordings.writer import RecordingWriter
from rig.transports.wssend import can_write_now, write_binary_now, write_now

RATE = 16_000
FRAME = 320
FRAME_NS = 20_000_000


class _NullTransport(asyncio.Transport):
    """A transport that takes every write and keeps nothing (the socket is not measured)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def write(self, data: Any) -> None:
        self.bytes += len(data)

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _Writer(RecordingWriter):
    """The writer's hand-off, its thread never started: the queue is emptied here."""

    tmp = ""  # where the rollouts' directories are named (never written)

    def drain(self) -> None:
        q = self._q
        while not q.empty():
            q.get_nowait()
        self._done = self._put_n


def _connection() -> ClientConnection:
    protocol = ClientProtocol(parse_uri("ws://127.0.0.1:9/"))
    conn = ClientConnection(protocol)
    conn.connection_made(_NullTransport())
    protocol.state = protocol.state.__class__.OPEN  # past the handshake, as after connect()
    return conn


def measure(frames: int, streams: int, path: str = "general") -> dict[str, float]:
    return asyncio.run(_measure(frames, streams, path))


class _Stream:
    """One rollout's uplink pieces, as a session holds them."""

    def __init__(self, frames: int, writer: _Writer, k: int) -> None:
        seconds = frames * FRAME / RATE + 1
        self.pacer = Pacer(PacerConfig(RATE, FRAME), t0_ns=10**12 + k * 1_000_000)
        self.uplink = Uplink([Play(tone(300, seconds, RATE, level_dbfs=-20.0).pcm)], self.pacer)
        self.listener = Listener(self.pacer.t0_ns)
        # the rollout's directory is only named: nothing is opened, the queue is drained here
        self.sink = RolloutSink(writer.rollout(os.path.join(writer.tmp, str(k)), RATE))
        self.ws = _connection()
        self.dialect = RawPcmDialect(RATE)


async def _measure(frames: int, streams: int, path: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        writer = _Writer()
        writer.tmp = tmp
        group = [_Stream(frames, writer, k) for k in range(streams)]
        if path == "plain":
            return _serve_plain(group, frames, writer)
        return _serve(group, frames, writer)


def _serve(group: list[_Stream], frames: int, writer: _Writer) -> dict[str, float]:
    parts: dict[str, float] = dict.fromkeys(("observe", "next_frame", "send", "sent", "put"), 0.0)
    clock = time.perf_counter_ns
    n = 0
    for _ in range(frames):
        for s in group:  # every stream's frame k, then frame k + 1: as the tick serves them
            uplink, listener = s.uplink, s.listener
            deadline = s.pacer.deadline_ns(uplink.next_seq)
            t0 = clock()
            obs = listener.observe(deadline)
            t1 = clock()
            frame = uplink.next_frame(obs)
            t2 = clock()
            if frame is None:
                raise RuntimeError("the script ended before the frames were served")
            assert can_write_now(s.ws)
            msgs = s.dialect.encode_audio(frame.pcm, frame.seq, frame.deadline_ns, deadline + 1)
            write_now(s.ws, msgs)
            t3 = clock()
            records, _ = uplink.sent(frame, deadline + 100_000, None)
            t4 = clock()
            s.sink.put_all(records)
            listener.release(deadline + 100_000)
            t5 = clock()
            _laps(parts, (t0, t1, t2, t3, t4, t5))
            n += 1
        writer.drain()
    return _per_frame(parts, n)


def _laps(parts: dict[str, float], stamps: tuple[int, ...]) -> None:
    """Piece k of `parts` (in order) took stamps[k + 1] - stamps[k]."""
    for key, t0, t1 in zip(parts, stamps, stamps[1:], strict=False):
        parts[key] += t1 - t0


def _per_frame(parts: dict[str, float], n: int) -> dict[str, float]:
    """µs per frame of each piece over `n` frames, and their total."""
    out = {k: v / n / 1e3 for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def _serve_plain(group: list[_Stream], frames: int, writer: _Writer) -> dict[str, float]:
    """`_serve` on the tick's plain path (`Tick.serve`, `Session._sent_pcm`); each stream's
    first frame starts its Play on the general path, untimed."""
    parts = dict.fromkeys(("observe", "plain_pcm", "send", "sent", "put"), 0.0)
    clock = time.perf_counter_ns
    n = 0
    for s in group:
        uplink = s.uplink
        frame = uplink.next_frame(s.listener.observe(s.pacer.deadline_ns(0)))
        assert frame is not None
        uplink.sent(frame, frame.deadline_ns + 100_000, None)
    writer.drain()
    for _ in range(frames):
        for s in group:
            uplink, listener, pacer = s.uplink, s.listener, s.pacer
            seq = pacer.next_seq
            deadline = pacer.deadline_ns(seq)
            t0 = clock()
            obs = listener.observe(deadline)
            t1 = clock()
            pcm = uplink.plain_pcm()
            t2 = clock()
            if pcm is None:
                raise RuntimeError("a frame left the plain path (the script ended?)")
            uplink.last_obs = obs
            ws = s.ws
            assert can_write_now(ws)
            msgs = s.dialect.encode_audio(pcm, seq, deadline, deadline + 1)
            if not (
                len(msgs) == 1 and isinstance(msgs[0], bytes) and write_binary_now(ws, msgs[0])
            ):
                write_now(ws, msgs)
            t3 = clock()
            t_sent = deadline + 100_000
            late, records = uplink.sent_plain_seq(seq, t_sent)
            t4 = clock()
            s.sink.up_frame(pcm, uplink.plain_clean, RATE, seq, t_sent, deadline, late,
                            uplink.plain_src)  # fmt: skip
            if records:
                s.sink.put_all(records)
            listener.release(t_sent)
            t5 = clock()
            _laps(parts, (t0, t1, t2, t3, t4, t5))
            n += 1
        writer.drain()
    return _per_frame(parts, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=300, help="per stream")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--streams", type=int, default=100, help="served in turn (cold caches)")
    ap.add_argument("--json", help="write the runs here")
    ap.add_argument("--path", choices=["general", "plain"], default="general",
                    help="the general path (next_frame) or the tick's plain one")  # fmt: skip
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, Python "
          f"{platform.python_version()}; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    runs = [measure(args.frames, args.streams, args.path) for _ in range(args.repeat)]
    keys: list[str] = list(runs[0])
    med: Callable[[str], float] = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
    print(f"µs per frame ({args.path} path), median (min-max) of {args.repeat} runs, "
          f"{args.streams} streams x {args.frames} frames:")  # fmt: skip
    for k in keys:
        lo, hi = min(r[k] for r in runs), max(r[k] for r in runs)
        print(f"  {k:11s} {med(k):6.2f} ({lo:.2f}-{hi:.2f})")
    print(f"load after {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(runs, f)


if __name__ == "__main__":
    main()
