"""WebRTC cost and capacity on this machine: per-frame breakdown, bare-aiortc anchor, capacity.

    python bench/webrtc.py [--levels 1,4,8,16,25] [--speech-s 3] [--frames 2000] [--repeats 3]

1. Breakdown: CPU time per 20 ms frame of each stage of the media path, measured on the real
   components (PyAV/libopus, aiortc, pylibsrtp, a loopback UDP socket), each stage run
   `--frames` times in a row, best of `--repeats` (thread CPU time; the machine is shared, the
   minimum is the least disturbed). Two columns: the path the rig used before (aiortc's
   sender and receiver: resampler + encoder, `RtpPacket`, aiortc's jitter buffer, decoder
   thread and its hop back to the loop) and the rig's direct path now.
2. Anchor: N pairs of bare aiortc peers (no rig code on the media path: aiortc's own track
   pacing, encoder thread, sender task, receiver, jitter buffer, decoder thread) exchange paced
   48 kHz Opus on loopback, the far ends in a child process. CPU per frame of the near side's
   process and its send lateness (the track's deadline -> the RTP packet handed to the
   socket) are the ceiling aiortc itself allows here.
3. Capacity: N concurrent rig rollouts against `rig sim --transport webrtc` (child process),
   per level right after the anchor at the same N: uplink send lateness over all frames of all
   rollouts (deadline -> RTP packet handed to the OS), stalls, rig CPU per frame (process CPU
   / uplink frames; each frame also receives one), the sim's CPU per frame, and the ratio
   rig / anchor CPU per frame.
Output is markdown; numbers depend on the machine and its other load (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import fractions
import json
import multiprocessing as mp
import os
import platform
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.plan import PlanBuilder
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.runs.specs import ws_factory
from rig.session import SessionConfig
from rig.transports.webrtc import WebRtcTransport, get_signalling

RATE = 48_000
FRAME = 960


def _signal(frames: int) -> np.ndarray:
    t = np.arange(FRAME * frames) / RATE
    rng = np.random.default_rng(1)
    x = 6000 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (x + 800 * rng.standard_normal(t.size)).astype(np.int16)


def _per_frame_us(fn: Callable[[int], Any], frames: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for k in range(frames):
            fn(k)
        best = min(best, (time.thread_time() - t0) / frames * 1e6)
    return round(best, 1)


def breakdown(frames: int, repeats: int) -> list[tuple[str, float | None, float | None, str]]:
    """(stage, before us, now us, note) per 20 ms frame."""
    import av
    import pylibsrtp
    from aiortc.codecs.opus import OpusDecoder, OpusEncoder
    from aiortc.jitterbuffer import JitterBuffer as AiortcJitterBuffer
    from aiortc.jitterbuffer import JitterFrame
    from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
    from aiortc.rtcrtpreceiver import StreamStatistics
    from aiortc.rtp import HeaderExtensionsMap, RtpPacket

    from rig.transports.webrtc.codec import OpusFrameDecoder, OpusFrameEncoder
    from rig.transports.webrtc.rtp import (
        JitterBuffer,
        RtpPacketizer,
        RtpReceiveStats,
        parse_rtp,
    )

    x = _signal(frames)
    pcm = [x[k * FRAME : (k + 1) * FRAME] for k in range(frames)]
    rows: list[tuple[str, float | None, float | None, str]] = []

    def av_frame(k: int) -> Any:
        f = av.AudioFrame.from_ndarray(pcm[k].reshape(1, -1), format="s16", layout="mono")
        f.sample_rate = RATE
        f.pts = k * FRAME
        f.time_base = fractions.Fraction(1, RATE)
        return f

    def rig_before() -> Callable[[int], Any]:
        codec: Any = av.CodecContext.create("libopus", "w")
        codec.bit_rate, codec.format, codec.layout = 64_000, "s16", "mono"
        codec.sample_rate, codec.time_base = RATE, fractions.Fraction(1, RATE)
        codec.options = {"application": "voip"}
        rs = av.AudioResampler(format="s16", layout="mono", rate=RATE, frame_size=FRAME)
        return lambda k: [list(codec.encode(f)) for f in rs.resample(av_frame(k))]

    aiortc_enc = OpusEncoder()
    encoders = {c: OpusFrameEncoder(complexity=c) for c in (10, 5, 2)}
    before = _per_frame_us(rig_before(), frames, repeats)
    rows.append(("Opus encode, rig before (resampler + libopus cx 10)", before, None, ""))
    rows.append(
        (
            "Opus encode, aiortc's own (stereo resampler + libopus, 96 kbit/s)",
            _per_frame_us(lambda k: aiortc_enc.encode(av_frame(k)), frames, repeats),
            None,
            "what aiortc's sender runs for raw frames",
        )
    )
    for c, enc in encoders.items():
        rows.append(
            (
                f"Opus encode, rig now ({enc.backend}, no resampler), complexity {c}",
                None,
                _per_frame_us(lambda k, e=enc: e.encode(pcm[k]), frames, repeats),
                "default" if c == 5 else ("the sim's downlink" if c == 2 else ""),
            )
        )
    pyav_enc = OpusFrameEncoder(complexity=5, backend="pyav")
    rows.append(
        (
            "Opus encode, PyAV codec context (reused frame, no resampler), complexity 5",
            None,
            _per_frame_us(lambda k: pyav_enc.encode(pcm[k]), frames, repeats),
            "the previous pass's path: same packets, PyAV's per-call overhead",
        )
    )
    payloads = [p for k in range(frames) for p in OpusFrameEncoder().encode(pcm[k])]

    params = RTCRtpParameters(
        headerExtensions=[
            RTCRtpHeaderExtensionParameters(id=1, uri="urn:ietf:params:rtp-hdrext:sdes:mid")
        ]
    )
    ext_map = HeaderExtensionsMap()
    ext_map.configure(params)

    def aiortc_packet(k: int) -> bytes:
        p = RtpPacket(payload_type=111, sequence_number=k & 0xFFFF, timestamp=k * FRAME)
        p.ssrc, p.payload, p.marker = 1234, payloads[k], 1
        p.extensions.mid = "0"
        return p.serialize(ext_map)

    pz = RtpPacketizer(1234, 111, extensions=[(1, b"0")])
    rows.append(
        (
            "RTP packetise",
            _per_frame_us(aiortc_packet, frames, repeats),
            _per_frame_us(lambda k: pz.packet(payloads[k], FRAME), frames, repeats),
            "aiortc RtpPacket + serialize / RtpPacketizer",
        )
    )
    packets = [aiortc_packet(k) for k in range(frames)]
    key = os.urandom(30)
    prof = pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80
    tx = pylibsrtp.Session(
        pylibsrtp.Policy(key=key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND, srtp_profile=prof)
    )
    protected = [tx.protect(p) for p in packets]

    def srtp(kind: int, fn: Callable[[Any, int], Any]) -> Callable[[int], Any]:
        """A fresh session per pass (libsrtp refuses a sequence number twice)."""
        cur: list[Any] = [None]

        def run(k: int) -> Any:
            if k == 0:
                cur[0] = pylibsrtp.Session(
                    pylibsrtp.Policy(key=key, ssrc_type=kind, srtp_profile=prof)
                )
            return fn(cur[0], k)

        return run

    out_kind, in_kind = pylibsrtp.Policy.SSRC_ANY_OUTBOUND, pylibsrtp.Policy.SSRC_ANY_INBOUND
    us = _per_frame_us(srtp(out_kind, lambda s, k: s.protect(packets[k])), frames, repeats)
    rows.append(("SRTP protect (pylibsrtp)", us, us, "same in both"))
    us = _per_frame_us(srtp(in_kind, lambda s, k: s.unprotect(protected[k])), frames, repeats)
    rows.append(("SRTP unprotect (pylibsrtp)", us, us, "same in both"))
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.bind(("127.0.0.1", 0))
    b.setblocking(False)
    addr = b.getsockname()

    def udp(k: int) -> None:
        a.sendto(protected[k], addr)
        b.recv(2048)

    us = _per_frame_us(udp, frames, repeats)
    rows.append(("UDP sendto + recv on loopback (kernel)", us, us, "same in both"))
    a.close()
    b.close()
    rows.append(
        (
            "RTP parse",
            _per_frame_us(lambda k: RtpPacket.parse(packets[k], ext_map), frames, repeats) * 2,
            _per_frame_us(lambda k: parse_rtp(packets[k]), frames, repeats),
            "before: the tap and aiortc each parsed it",
        )
    )
    parsed = [RtpPacket.parse(p, ext_map) for p in packets]
    for p in parsed:
        p._data = p.payload  # type: ignore[attr-defined]  # what depayload leaves for Opus

    def aiortc_rx() -> Callable[[int], Any]:
        from aiortc import clock

        stats, jb = StreamStatistics(RATE), AiortcJitterBuffer(capacity=16, prefetch=4)
        active: dict[int, Any] = {}

        def run(k: int) -> Any:
            p = parsed[k]
            active[p.ssrc] = clock.current_datetime()
            stats.add(p)
            return jb.add(p)

        return run

    def rig_rx() -> Callable[[int], Any]:
        stats, jb = RtpReceiveStats(RATE), JitterBuffer(4)

        def run(k: int) -> Any:
            h = parse_rtp(packets[k])
            stats.add(h.sequence, h.timestamp, k * 20_000_000)
            return jb.add(h.sequence, h.timestamp, payloads[k], k * 20_000_000)

        return run

    before_rx = min(_per_frame_us(aiortc_rx(), frames, 1) for _ in range(repeats))
    now_rx = min(_per_frame_us(rig_rx(), frames, 1) for _ in range(repeats))
    rows.append(
        (
            "receive stats + jitter buffer",
            before_rx,
            round(max(0.0, now_rx - rows[-1][2]), 1),  # type: ignore[operator]
            "aiortc StreamStatistics + JitterBuffer / RtpReceiveStats + JitterBuffer",
        )
    )
    a_dec, r_dec = OpusDecoder(), OpusFrameDecoder()
    dec_before = _per_frame_us(
        lambda k: a_dec.decode(JitterFrame(payloads[k], k * FRAME)), frames, repeats
    )
    rows.append(
        (
            f"Opus decode (rig: {r_dec.backend})",
            dec_before,
            _per_frame_us(lambda k: r_dec.decode(payloads[k]), frames, repeats),
            "aiortc: stereo out / rig: mono out",
        )
    )
    p_dec = OpusFrameDecoder("pyav")
    rows.append(
        (
            "Opus decode, PyAV codec context (mono out)",
            None,
            _per_frame_us(lambda k: p_dec.decode(payloads[k]), frames, repeats),
            "the previous pass's path: same PCM",
        )
    )
    rows.append(
        (
            "decoder thread hop (queue -> thread -> run_coroutine_threadsafe)",
            decoder_hop_us(payloads, frames, repeats, dec_before),
            0.0,
            "process CPU of aiortc's decoder_worker minus its decode",
        )
    )
    return rows


def decoder_hop_us(payloads: list[bytes], frames: int, repeats: int, decode_us: float) -> float:
    """aiortc's own decoder thread (its `decoder_worker`), fed like its receiver feeds it."""
    from aiortc.codecs import get_capabilities
    from aiortc.jitterbuffer import JitterFrame
    from aiortc.rtcrtpreceiver import decoder_worker

    codec = next(c for c in get_capabilities("audio").codecs if c.name.lower() == "opus")

    async def run() -> float:
        loop = asyncio.get_running_loop()
        in_q: queue.Queue[Any] = queue.Queue()
        out_q: asyncio.Queue[Any] = asyncio.Queue()
        th = threading.Thread(target=decoder_worker, args=(loop, in_q, out_q, threading.Event()))
        th.start()
        t0 = time.process_time()
        for k in range(frames):
            in_q.put((codec, JitterFrame(payloads[k], k * FRAME)))
            await out_q.get()
        cpu = time.process_time() - t0
        in_q.put(None)
        await out_q.get()
        th.join()
        return cpu / frames * 1e6

    best = min(asyncio.run(run()) for _ in range(repeats))
    return round(max(0.0, best - decode_us), 1)


# --- the bare aiortc anchor ----------------------------------------------------------------


def _anchor_track_class() -> Any:
    import av
    from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

    class PacedTone(MediaStreamTrack):
        """aiortc's stock pattern (AudioStreamTrack): a new 20 ms frame per recv(), paced by
        sleeping to start + n*20 ms; deadlines kept for the lateness measurement."""

        kind = "audio"

        def __init__(self, frames: int) -> None:
            super().__init__()
            self.x = _signal(50)
            self.frames = frames
            self.n = 0
            self.start: float | None = None
            self.deadlines: list[float] = []
            self.done = asyncio.Event()

        async def recv(self) -> Any:
            if self.n >= self.frames:
                self.done.set()
                raise MediaStreamError
            if self.start is None:
                self.start = time.monotonic()
            due = self.start + self.n * 0.02
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.deadlines.append(due)
            k = self.n % 50
            f = av.AudioFrame.from_ndarray(
                self.x[k * FRAME : (k + 1) * FRAME].reshape(1, -1), format="s16", layout="mono"
            )
            f.sample_rate, f.pts = RATE, self.n * FRAME
            f.time_base = fractions.Fraction(1, RATE)
            self.n += 1
            return f

    return PacedTone


async def _drain(track: Any) -> None:
    from aiortc.mediastreams import MediaStreamError

    try:
        while True:
            await track.recv()
    except MediaStreamError:
        pass


def _anchor_far_end(conn: Any, frames: int) -> None:
    """Child process: answer each offer with a bare aiortc peer sending the same paced tone."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    from rig.transports.webrtc.peer import gather_on

    PacedTone = _anchor_track_class()

    async def main() -> None:
        pcs = []
        while True:
            offer = await asyncio.to_thread(conn.recv)
            if offer is None:
                break
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pcs.append(pc)
            pc.on("track", lambda t: asyncio.ensure_future(_drain(t)))
            await pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
            pc.addTrack(PacedTone(frames))
            with gather_on(["127.0.0.1"]):
                await pc.setLocalDescription(await pc.createAnswer())
            conn.send(pc.localDescription.sdp)
        for pc in pcs:
            await pc.close()

    asyncio.run(main())


async def anchor_level(n: int, frames: int) -> dict[str, Any]:
    """n bare aiortc peer pairs for `frames` frames each; near side measured in this process."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    from rig.transports.webrtc.peer import gather_on

    PacedTone = _anchor_track_class()
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_anchor_far_end, args=(there, frames), daemon=True)
    child.start()
    pcs, tracks, sent = [], [], []
    cpu0 = time.process_time()
    try:
        for _ in range(n):
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            track = PacedTone(frames)
            pc.addTransceiver(track, direction="sendrecv")
            pc.on("track", lambda t: asyncio.ensure_future(_drain(t)))
            with gather_on(["127.0.0.1"]):
                await pc.setLocalDescription(await pc.createOffer())
            here.send(pc.localDescription.sdp)
            answer = await asyncio.to_thread(here.recv)
            await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
            late: list[float] = []  # instrumentation only: packet to the socket - its deadline
            _stamp_rtp(pc, track, late)
            pcs.append(pc)
            tracks.append(track)
            sent.append(late)
        await asyncio.wait_for(asyncio.gather(*(t.done.wait() for t in tracks)), frames * 0.02 + 30)
        await asyncio.sleep(0.3)
        cpu = time.process_time() - cpu0
    finally:
        for pc in pcs:
            await pc.close()
        here.send(None)
        child.join(10)
    a = np.asarray([x for late in sent for x in late] or [float("nan")])
    total = sum(len(t.deadlines) for t in tracks)
    return {
        "cpu_per_frame_us": round(cpu / max(1, total) * 1e6, 1),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "frames": total,
    }


def _stamp_rtp(pc: Any, track: Any, late_ms: list[float]) -> None:
    """aiortc's sender takes a frame, encodes it, sends it, then asks for the next: a packet
    leaving belongs to the latest frame handed over."""
    from aiortc.rtp import is_rtcp

    dtls = pc.getTransceivers()[0].sender.transport
    send = dtls._send_rtp

    async def stamped(data: bytes) -> None:
        await send(data)
        if not is_rtcp(data) and track.deadlines:
            late_ms.append((time.monotonic() - track.deadlines[-1]) * 1e3)

    dtls._send_rtp = stamped


# --- the rig against its reference system --------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sim(port: int, transport: str = "webrtc") -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rig", "sim", "--transport", transport, "--port", str(port)]
        + ["--latency-ms", "300", "--endpoint-silence-ms", "300", "--reply-s", "1.0"]
        + ["--sample-rate", str(RATE)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("sim did not start")


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def plan(speech_s: float) -> Any:
    return (
        PlanBuilder(RATE)
        .add_silence(0.3)
        .add_turn(tone(300.0, speech_s, RATE, -12.0), "t0")
        .add_silence(1.0)
        .build()
    )


async def level(
    url: str,
    n: int,
    speech_s: float,
    out: str,
    sim_pid: int,
    rt_priority: int,
) -> dict[str, Any]:
    """n rig rollouts at once; `url` ws://... uses the WebSocket transport (the session floor).

    CPU is split by thread: the loop thread's own CPU time (`time.thread_time` around the
    run, which the loop runs in this thread) and the rest of the process (writer thread,
    codec thread, executor threads: process CPU minus the loop thread)."""

    def make(clock: Any, gate: asyncio.Semaphore) -> Any:
        if url.startswith("ws"):
            return ws_factory(url, "rig", RATE, {})(clock, gate)
        return WebRtcTransport(
            get_signalling("whip", url),
            clock,
            open_gate=gate,
            target_host="127.0.0.1",
        )

    specs = [
        RolloutSpec(f"r{i}", plan(speech_s), make, {"url": url}, {}, SessionConfig(max_s=30))
        for i in range(n)
    ]
    run_id = f"{'ws' if url.startswith('ws') else 'rtc'}{n}-{os.urandom(3).hex()}"
    runner = Runner(
        out,
        RunnerSettings(run_id=run_id, concurrency=n, rt_priority=rt_priority),
        clock=MonotonicClock(),
    )
    sim0 = proc_cpu_s(sim_pid)
    t0, wall0, loop0 = os.times(), time.monotonic(), time.thread_time()
    await runner.run(specs)
    t1, wall = os.times(), time.monotonic() - wall0
    loop_cpu = time.thread_time() - loop0
    user, system = t1.user - t0.user, t1.system - t0.system
    cpu = user + system
    sim_cpu = proc_cpu_s(sim_pid) - sim0
    late: list[float] = []
    statuses: dict[str, int] = {}
    frames = stalls = 0
    for i in range(n):
        d = Path(out, run_id, "rollouts", f"r{i}")
        m = json.loads((d / "metrics.json").read_text())
        statuses[m["status"]] = statuses.get(m["status"], 0) + 1
        stalls += int(m["uplink"]["stalls"])
        for line in (d / "chunks.jsonl").read_text().splitlines():
            c = json.loads(line)
            if c["dir"] == "up" and c.get("lateness_ns") is not None:
                late.append(c["lateness_ns"] / 1e6)
                frames += 1
    a = np.asarray(late or [float("nan")])
    return {
        "n": n,
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
        "stalls": stalls,
        "cpu_per_frame_us": round(cpu / max(1, frames) * 1e6, 1),
        "loop_per_frame_us": round(loop_cpu / max(1, frames) * 1e6, 1),
        "threads_per_frame_us": round((cpu - loop_cpu) / max(1, frames) * 1e6, 1),
        "sim_cpu_per_frame_us": round(sim_cpu / max(1, frames) * 1e6, 1),
        "cpu_share": round(cpu / wall, 3),
        "sys_share": round(system / max(cpu, 1e-9), 3),
        "status": statuses,
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--levels", default="1,4,8,16,25")
    ap.add_argument("--speech-s", type=float, default=3.0)
    ap.add_argument("--frames", type=int, default=2000, help="frames per breakdown stage")
    ap.add_argument("--repeats", type=int, default=3, help="breakdown repeats (best kept)")
    ap.add_argument("--skip-breakdown", action="store_true")
    ap.add_argument("--skip-anchor", action="store_true", help="only the rig (for profiling)")
    ap.add_argument("--skip-ws", action="store_true", help="no WebSocket floor column")
    ap.add_argument(
        "--rt-priority", type=int, default=3, help="the rig loop's SCHED_FIFO (as rig run)"
    )

    args = ap.parse_args()
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln), "?"
    )
    print(f"# bench/webrtc.py on {platform.node()} ({os.cpu_count()} cores, {cpu})")
    print(f"{time.ctime()}, load average {loadavg()}\n")
    if not args.skip_breakdown:
        print("## Per 20 ms frame, CPU us (best of repeats, thread CPU time)\n")
        print("| stage | rig before (aiortc path) | rig now (direct) | note |")
        print("|---|---|---|---|")
        rows = breakdown(args.frames, args.repeats)
        for name, before, now, note in rows:
            b = "" if before is None else f"{before}"
            w = "" if now is None else f"{now}"
            print(f"| {name} | {b} | {w} | {note} |", flush=True)
        print(f"\nload average after the breakdown: {loadavg()}\n")
    port, ws_port = free_port(), free_port()
    sim = start_sim(port)
    ws_sim = None if args.skip_ws else start_sim(ws_port, "ws")
    url = f"http://127.0.0.1:{port}/offer"
    plan_frames = round((0.3 + args.speech_s + 1.0) / 0.02)
    print("## Capacity: rig rollouts vs the bare-aiortc anchor at the same N, one run\n")
    print(
        "| N | rig late p50 ms | p99 ms | max ms | stalls | rig CPU/frame us "
        "| loop thread us | other threads us | rig CPU | sim CPU/frame us | anchor CPU/frame us "
        "| anchor late p99 ms | rig/anchor | WS floor CPU/frame us | status | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    prio = args.rt_priority
    try:
        with tempfile.TemporaryDirectory() as out:
            for n in [int(x) for x in args.levels.split(",")]:
                anc: dict[str, Any] = {"cpu_per_frame_us": nan, "p99_ms": None}
                if not args.skip_anchor:
                    anc = asyncio.run(anchor_level(n, plan_frames))
                r = asyncio.run(level(url, n, args.speech_s, out, sim.pid, prio))
                ws = {"cpu_per_frame_us": nan}
                if ws_sim is not None:
                    ws_url = f"ws://127.0.0.1:{ws_port}"
                    ws = asyncio.run(
                        level(ws_url, n, args.speech_s, out, ws_sim.pid, args.rt_priority)
                    )
                ratio = r["cpu_per_frame_us"] / anc["cpu_per_frame_us"]
                print(
                    f"| {n} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
                    f"{r['stalls']} | {r['cpu_per_frame_us']} ({r['sys_share']:.0%} sys) | "
                    f"{r['loop_per_frame_us']} | {r['threads_per_frame_us']} | "
                    f"{r['cpu_share']:.0%} | {r['sim_cpu_per_frame_us']} | "
                    f"{anc['cpu_per_frame_us']} | {anc['p99_ms']} | {ratio:.2f} | "
                    f"{ws['cpu_per_frame_us']} | {r['status']} | {loadavg()} |",
                    flush=True,
                )
    finally:
        for p in (sim, ws_sim):
            if p is not None:
                p.terminate()
                p.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
