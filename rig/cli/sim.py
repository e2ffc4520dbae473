"""`rig sim`: run the reference system and log its ground truth."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING, Any

from rig.extras import BACKENDS, TRANSPORTS, require
from rig.runs.relays import impairment

if TYPE_CHECKING:
    from rig.sim.engine import SimConfig
    from rig.sim.server import NetConfig


def add_sim_knobs(p: argparse.ArgumentParser, with_seed: bool = True) -> None:
    g = p.add_argument_group("reference system knobs (ground truth)")
    g.add_argument(
        "--latency-ms",
        type=float,
        default=400.0,
        help="model time from end-of-speech detection to the first reply audio",
    )
    g.add_argument(
        "--endpoint-silence-ms",
        type=float,
        default=500.0,
        help="silence after speech that ends the user's turn",
    )
    g.add_argument("--threshold-dbfs", type=float, default=-40.0, help="energy gate")
    g.add_argument(
        "--noise-floor-margin-db",
        type=float,
        default=18.0,
        help="the gate rises to this far above the input's noise floor (the quietest 10 ms "
        "of the last second), so steady noise does not hold a turn open; 0: a fixed gate",
    )
    g.add_argument(
        "--sample-rate", type=int, default=16_000, help="rate the system speaks and hears, Hz"
    )
    g.add_argument("--chunk-ms", type=float, default=40.0, help="reply chunk size")
    g.add_argument(
        "--reply-speed",
        type=float,
        default=1.0,
        help="1 = real time, >1 faster than real time, 0 = all at once",
    )
    g.add_argument("--reply-tone-hz", type=float, default=440.0, help="reply tone pitch")
    g.add_argument("--reply-s", type=float, default=1.0, help="reply tone duration")
    g.add_argument("--reply-gap-ms", type=float, default=0.0, help="silence inside the reply")
    g.add_argument("--reply-wav", help="reply with this audio file instead of a tone")
    g.add_argument(
        "--reply-gain-db",
        type=float,
        default=0.0,
        help="reply level: the tone's -12 dBFS RMS (or the --reply-wav file) + this",
    )
    g.add_argument(
        "--reply-voice",
        choices=["tone", "buzz", "whisper"],
        default="tone",
        help="tone (a sine), buzz (harmonics of --reply-tone-hz: voiced), whisper "
        "(noise-excited: no harmonics); ground truth for the reply voice measures",
    )
    g.add_argument(
        "--reply-follow-level",
        action="store_true",
        help="each reply's level follows the user's turn (+1 dB per dB above -20 dBFS RMS)",
    )
    g.add_argument(
        "--whisper-below-dbfs",
        type=float,
        help="whisper back (noise-excited reply) to a turn quieter than this RMS",
    )
    g.add_argument("--omit-silence", action="store_true", help="do not send silent reply chunks")
    g.add_argument("--no-barge-in", action="store_true", help="keep talking when interrupted")
    g.add_argument(
        "--self-echo-sensitive",
        action="store_true",
        help="hear its own reply when the rig feeds it back (rig run --echo) and yield to it "
        "(default: it cancels its own echo first)",
    )
    g.add_argument(
        "--policy",
        choices=["reply", "never", "always", "backchannel"],
        default="reply",
        help="baseline behaviour: reply (fixed delay: --endpoint-silence-ms + --latency-ms), "
        "never (never speaks), always (talks whenever the user is quiet), backchannel "
        "(a short tone at every pause, never a reply)",
    )
    g.add_argument(
        "--yield-after-ms",
        type=float,
        default=0.0,
        help="when interrupted, stop talking exactly this long after detecting the barge-in "
        "(0: at once; the truth log's reply_cancel is the stop)",
    )
    g.add_argument("--net-delay-ms", type=float, default=0.0, help="one-way delay, both directions")
    g.add_argument("--net-delay-up-ms", type=float, help="uplink delay (overrides --net-delay-ms)")
    g.add_argument("--net-delay-down-ms", type=float, help="downlink delay (overrides)")
    g.add_argument("--net-jitter-ms", type=float, default=0.0, help="± uniform jitter per message")
    g.add_argument("--clock-offset-ms", type=float, default=0.0, help="server clock offset")
    g.add_argument("--clock-drift-ppm", type=float, default=0.0, help="server clock drift")
    g.add_argument(
        "--clock-step-ms",
        type=float,
        default=0.0,
        help="the server clock jumps by this much (either sign) --clock-step-at-s after start",
    )
    g.add_argument(
        "--clock-step-at-s", type=float, default=0.0, help="when --clock-step-ms happens"
    )
    g.add_argument(
        "--withhold-stamps",
        action="store_true",
        help="send no server clock (no server_ts_ms, probes echoed without t1/t2): like most "
        "hosted systems; the rig then times endpointing from round trips",
    )
    if with_seed:
        g.add_argument("--seed", type=int, default=0, help="jitter seed")


def sim_from_args(args: argparse.Namespace) -> tuple[SimConfig, NetConfig, Any]:
    from rig.audio.source import load_wav
    from rig.sim.engine import SimConfig
    from rig.sim.server import NetConfig

    cfg = SimConfig(
        sample_rate=args.sample_rate,
        latency_ms=args.latency_ms,
        endpoint_silence_ms=args.endpoint_silence_ms,
        threshold_dbfs=args.threshold_dbfs,
        noise_floor_margin_db=args.noise_floor_margin_db
        if args.noise_floor_margin_db > 0
        else None,
        chunk_ms=args.chunk_ms,
        reply_speed=args.reply_speed,
        reply_tone_hz=args.reply_tone_hz,
        reply_s=args.reply_s,
        reply_gap_ms=args.reply_gap_ms,
        omit_silence=args.omit_silence,
        barge_in=not args.no_barge_in,
        yield_after_ms=args.yield_after_ms,
        policy=args.policy,
        reply_level_dbfs=-12.0 + args.reply_gain_db,
        reply_voice=args.reply_voice,
        reply_follow_level=args.reply_follow_level,
        whisper_below_dbfs=args.whisper_below_dbfs,
        self_echo_sensitive=bool(args.self_echo_sensitive),
    )
    d = args.net_delay_ms
    net = NetConfig(
        delay_up_ms=d if args.net_delay_up_ms is None else args.net_delay_up_ms,
        delay_down_ms=d if args.net_delay_down_ms is None else args.net_delay_down_ms,
        jitter_ms=args.net_jitter_ms,
        clock_offset_ms=args.clock_offset_ms,
        clock_drift_ppm=args.clock_drift_ppm,
        clock_step_ms=args.clock_step_ms,
        clock_step_at_s=args.clock_step_at_s,
        seed=args.seed,
        withhold_stamps=bool(args.withhold_stamps),
    )
    reply = load_wav(args.reply_wav, cfg.sample_rate).pcm if args.reply_wav else None
    return cfg, net, reply


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sim", help="run the reference system (a voice system with ground truth)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (0: a free one)")
    p.add_argument("--truth-log", help="JSONL ground-truth log on the shared monotonic clock")
    from rig.runs.relays import add_impair_option

    add_impair_option(p)
    p.add_argument(
        "--impair-log",
        help="impair.jsonl path: every relayed chunk's applied delay and fate (default: "
        "impair.jsonl next to --truth-log, else none)",
    )
    p.add_argument(
        "--transport",
        choices=["ws", "webrtc", "device"],
        default="ws",
        help="webrtc: HTTP offer/answer at http://HOST:PORT/offer (and /api/offer), 48 kHz; "
        "device: listen on --input DEV, reply on --output DEV",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving one port (SO_REUSEPORT, --transport ws): a self-test at scale "
        "measures the rig, not the reference system (default 1)",
    )
    p.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--rt-priority",
        type=int,
        default=3,
        help="SCHED_FIFO priority for the server's loop thread, if permitted (0: normal): its "
        "truth stamps stay tight when the machine is busy",
    )
    p.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="the event loop: asyncio (default) or uvloop (the uvloop extra; docs/pacing.md)",
    )
    add_device_options(p)
    add_sim_knobs(p)


def add_device_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sound-card options (--transport device)")
    g.add_argument("--input", help="input device (name, index or HOSTAPI:NAME)")
    g.add_argument("--output", help="output device")
    g.add_argument("--device-rate", type=int, default=48_000, help="device sample rate")
    g.add_argument("--blocksize", type=int, default=0, help="frames per callback (0: auto)")
    g.add_argument("--latency", default="high", help="PortAudio latency: low, high or seconds")
    g.add_argument("--duplex", action="store_true", help="one full-duplex stream")
    g.add_argument(
        "--backend", choices=sorted(BACKENDS), default="sounddevice", help="PortAudio binding"
    )


def device_options(args: argparse.Namespace) -> Any:
    from rig.device.options import DeviceOptions, parse_latency
    from rig.errors import ConfigError

    if not args.input or not args.output:
        raise ConfigError("--transport device needs --input DEV and --output DEV")
    return DeviceOptions(
        output=args.output,
        input=args.input,
        rate=args.device_rate,
        blocksize=args.blocksize,
        latency=parse_latency(args.latency),
        duplex=args.duplex,
        backend=args.backend,
    )


def run_device(args: argparse.Namespace, cfg: SimConfig, reply: Any) -> int:
    """The reference system on sound cards (one conversation, until SIGINT/SIGTERM)."""
    from rig.audio.source import load_wav
    from rig.sim.device_server import DeviceSimServer

    opts = device_options(args)
    if args.reply_wav:  # the engine runs at the device rate
        reply = load_wav(args.reply_wav, opts.rate).pcm

    async def main() -> None:
        server = DeviceSimServer(cfg, opts, truth_log=args.truth_log, reply_audio=reply)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready() -> None:
            print(f"rig sim listening on device {opts.input} -> {opts.output}", flush=True)

        await server.run(stop, ready)
        print("rig sim stopped", file=sys.stderr)

    asyncio.run(main())
    return 0


def run(args: argparse.Namespace) -> int:
    from rig import realtime
    from rig.errors import ConfigError
    from rig.runs.workers import check_workers

    if check_workers(args.workers) > 1:
        if args.transport != "ws":
            raise ConfigError("--workers applies to --transport ws")
        if args.truth_log:
            raise ConfigError("--truth-log needs --workers 1 (one log per process would split it)")
    if args.parent_pid:
        from rig.childproc import die_with_parent

        die_with_parent(args.parent_pid)

    if args.transport in TRANSPORTS:
        require(TRANSPORTS[args.transport], f"--transport {args.transport}")
    if args.transport == "device":
        require(BACKENDS[args.backend], f"--transport device --backend {args.backend}")
    cfg, net, reply = sim_from_args(args)
    if impairment(args.impair) is not None and args.transport not in ("ws", "webrtc"):
        raise ConfigError("rig sim --impair covers --transport ws and webrtc")
    if (
        impairment(args.impair) is not None
        and args.transport == "webrtc"
        and args.host in ("0.0.0.0", "::", "")
    ):
        raise ConfigError(
            "rig sim --transport webrtc --impair needs --host ADDRESS (the relay "
            "hands that address out as the media candidate)"
        )
    if impairment(args.impair) is not None and args.workers > 1:
        raise ConfigError("rig sim --impair needs --workers 1 (one relay in front of one port)")
    with realtime.scheduling(args.rt_priority) as sched:
        if args.transport == "device":
            return run_device(args, cfg, reply)
        return run_ws_or_webrtc(args, cfg, net, reply, sched)


def scheduling_line(sched: dict[str, Any]) -> str:
    """What the server's loop thread got, in words (the dict is in the truth log)."""
    if sched.get("policy") == "SCHED_FIFO":
        line = f"loop thread at real-time priority {sched.get('priority')} (SCHED_FIFO)"
        if sched.get("helper_priority"):
            line += f", other threads at {sched['helper_priority']}"
        return line
    if not sched.get("requested_priority"):
        return "normal scheduling (--rt-priority 0)"
    return f"normal scheduling: {sched.get('reason') or 'real-time priority not granted'}"


def start_sim_workers(args: argparse.Namespace, port: int) -> list[Any]:
    """Workers 1..N-1 on the parent's port; returns once each is listening."""
    from rig.errors import RigError
    from rig.runs.workers import spawn, stop_all

    extra = ["--port", str(port), "--workers", str(args.workers)]
    procs = [spawn(args.argv, k, extra, pipe_stdout=True) for k in range(1, args.workers)]
    for p in procs:
        line = p.stdout.readline() if p.stdout is not None else ""
        if "listening" not in line:
            stop_all(procs)
            raise RigError(f"rig sim worker did not start: {line!r}")
    return procs


def _impair_log(args: argparse.Namespace) -> str | None:
    import os

    if args.impair_log:
        return str(args.impair_log)
    if args.truth_log:
        return os.path.join(os.path.dirname(os.path.abspath(args.truth_log)), "impair.jsonl")
    return None


def run_ws_or_webrtc(
    args: argparse.Namespace, cfg: SimConfig, net: Any, reply: Any, sched: dict[str, Any]
) -> int:

    async def main() -> None:
        server: Any
        relay: Any = None
        imp = impairment(args.impair)
        if args.transport == "webrtc":
            from rig.sim.webrtc_server import WebRtcSimServer

            if imp is not None:  # a UDP relay on every session's media path
                from rig.relay.udpprocess import UdpRelay

                relay = UdpRelay(imp)
                relay.start(_impair_log(args))  # main thread: dies with it
                imp = None  # signalling is served directly
            server = WebRtcSimServer(
                cfg, net, truth_log=args.truth_log, reply_audio=reply, media_relay=relay
            )
        else:
            from rig.sim.server import SimServer

            server = SimServer(cfg, net, truth_log=args.truth_log, reply_audio=reply)
        sharded = args.workers > 1
        others = []
        if imp is None:
            if sharded:
                url = await server.start(args.host, args.port, reuse_port=True)
            else:
                url = await server.start(args.host, args.port)
            if sharded and args.worker_index is None:  # the parent serves too, as worker 0
                others = await asyncio.to_thread(start_sim_workers, args, server.port)
        else:  # the sim listens privately; the relay takes the public port
            from rig.relay.process import TcpRelay

            inner = await server.start("127.0.0.1", 0)
            port = int(inner.rsplit(":", 1)[1])
            relay = TcpRelay("127.0.0.1", port, imp, listen_host=args.host, listen_port=args.port)
            host, rport = relay.start(_impair_log(args))  # main thread: dies with it
            url = f"ws://{host}:{rport}"
        print(f"rig sim listening on {url}", flush=True)
        if args.worker_index is None:  # after the URL line (a worker's would come before)
            from rig.runs.eventloop import event_loop

            on = event_loop()
            line = scheduling_line(sched) + ("" if on == "asyncio" else f", on {on}")
            print(f"rig sim: {line}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        if others:
            from rig.runs.workers import stop_all

            await asyncio.to_thread(stop_all, others)
        if relay is not None:
            await asyncio.to_thread(relay.stop)
        await server.stop()
        print(f"rig sim stopped after {server.state.connections} connections", file=sys.stderr)

    from rig.cli.listen import listening
    from rig.runs.eventloop import run_on

    with listening(args.host, args.port):
        run_on(args.loop, main())
    return 0
