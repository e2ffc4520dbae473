"""The options `rig run` and `rig demo` share, and the one place a Namespace becomes a run.

Each option's default is its RunConfig field's (rig.runs.config): one definition. The parser
side only adds flags and help texts; `config_from_args` is the only code that reads a run's
Namespace. Standard library, rig.errors and the config module at module level (building the
parser must stay light).
"""

from __future__ import annotations

import argparse
from typing import Any

from rig.runs.config import ALIASES, OPTION_FIELDS, TOLERANCE_OPTIONS, RunConfig, default
from rig.runs.config import int_or_auto as _int_or_auto
from rig.runs.relays import add_impair_option


def int_or_auto(value: str) -> int | str:
    """`--concurrency` and `--workers`: N or `auto` (N is range-checked in RunConfig.check)."""
    try:
        return _int_or_auto(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: `--concurrency N|auto` (auto: the runner's AIMD gate, rig.core.admission)
concurrency_arg = int_or_auto


def config_from_args(args: argparse.Namespace, **top: Any) -> RunConfig:
    """The run a parsed `rig run` / `rig demo` command line asks for (not yet checked)."""
    given = vars(args)
    names = set(OPTION_FIELDS) | set(TOLERANCE_OPTIONS)
    flat = {k: v for k, v in given.items() if k in names and k not in ALIASES}
    if "scenario" in given:
        top.setdefault("scenario", given["scenario"])
    top.setdefault("command", given.get("command") or "run")
    return RunConfig.from_options(flat, **top)


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=default("out"), help="output folder (default: recordings/)")
    p.add_argument("--run-id", help="run directory name (reuse one to resume)")
    p.add_argument("--headless", action="store_true", help="plain progress lines, no live view")
    p.add_argument(
        "--concurrency",
        type=concurrency_arg,
        default=default("concurrency"),
        help="rollouts at once (in total), or auto: as many as the event loop paces within "
        "its lag budget (AIMD; docs/pacing.md)",
    )
    add_capacity_options(p)
    p.add_argument(
        "--connect-concurrency",
        type=int,
        default=default("connect_concurrency"),
        help="simultaneous connects",
    )
    p.add_argument("--repeat", type=int, default=default("repeat"), help="run every item N times")
    p.add_argument(
        "--rt-priority",
        type=int,
        default=default("rt_priority"),
        help="SCHED_FIFO priority for the audio loop's thread, if permitted (0: normal "
        "scheduling; the default 3 sits under JACK's and PulseAudio's audio threads and over "
        "every normal process); what was obtained is in the manifest",
    )
    p.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default=default("loop"),
        help="the event loop: asyncio (default) or uvloop (the uvloop extra; less CPU per "
        "frame at many rollouts: docs/pacing.md); what ran is in the manifest",
    )
    p.add_argument(
        "--frame-ms",
        type=float,
        default=default("frame_ms"),
        help="uplink frame (20; the dialect's own, e.g. moshi 80)",
    )
    p.add_argument(
        "--drain-quiet-s",
        type=float,
        default=default("drain_quiet_s"),
        help="after the plan, stop once the system was quiet this long (playback)",
    )
    p.add_argument(
        "--max-s",
        type=float,
        default=default("max_s"),
        help="cap per rollout, s: the script stops max_s after its first frame, and anything "
        "stuck (connect, a send the peer never reads) is cut max_s + 1 s after the start: "
        "status timed_out",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=default("seed"),
        help="seed of everything random in the run (recorded)",
    )
    p.add_argument(
        "--asr-model",
        metavar="NAME|PATH",
        help="word-level onsets: transcribe both tracks after each rollout, in the analysis "
        "worker, with this faster-whisper model (a size name such as tiny.en, or a local "
        "CTranslate2 model directory); needs the asr extra (docs/metrics.md)",
    )
    p.add_argument(
        "--force-resume",
        action="store_true",
        help="resume into a run directory recorded with another target or configuration "
        "(refused otherwise; the differences are recorded in the manifest)",
    )
    p.add_argument(
        "--mqtt",
        help="publish telemetry to mqtt://[user[:pass]@]host[:port] (mqtts:// for TLS; "
        "password also from RIG_MQTT_PASSWORD)",
    )
    p.add_argument("--detail", help="rollout shown in the live view's detail panel")
    p.add_argument(
        "--progress-interval-s",
        type=float,
        default=default("progress_interval_s"),
        help="without the live view: a progress line (counts, rate, ETA) every N s (0: off)",
    )
    p.add_argument(
        "--device-clock",
        metavar="DEVICE_ID",
        help="probe this device's clock over MQTT (needs --mqtt) and fit it onto the shared "
        "clock; writes device_clock.json into the run directory",
    )
    p.add_argument(
        "--device-probe-interval-s",
        type=float,
        default=default("device_probe_interval_s"),
        help="with --device-clock: a probe every S seconds",
    )
    p.add_argument(
        "--probe-interval-s",
        type=float,
        default=default("probe_interval_s"),
        help="four-timestamp clock probes every N s, for the latency split (peers that do "
        "not answer them ignore them; 0 = off; default 0.5)",
    )
    p.add_argument(
        "--path-interval-s",
        type=float,
        default=default("path_interval_s"),
        help="measure the path every N s with no help from the server: a WebSocket ping "
        "round trip and the kernel's TCP_INFO (RTT, send backlog); 0 = off; default 1",
    )
    p.add_argument(
        "--no-tick",
        dest="tick",
        action="store_false",
        default=default("tick"),
        help="await every frame's deadline per stream instead of sending the frames of all "
        "due streams from one shared timer wake-up (for comparison; docs/pacing.md)",
    )
    add_impair_option(p)


def add_capacity_options(p: argparse.ArgumentParser) -> None:
    from rig.runs.workers import PER_LOOP_ROLLOUTS, usable_cores

    p.add_argument(
        "--workers",
        type=int_or_auto,
        default=default("workers"),
        help="worker processes the rollouts are sharded over, each with its own event loop "
        f"and writer; auto (the default): 1 up to {PER_LOOP_ROLLOUTS} rollouts at once, "
        f"then one per {PER_LOOP_ROLLOUTS}, at most the {usable_cores()} usable cores of "
        "this machine, or half of them when the target is on this machine (loopback: the "
        "system under test needs the rest; docs/pacing.md)",
    )
    p.add_argument(
        "--timing-tolerance-ms",
        type=float,
        default=default("timing_tolerance_ms"),
        help="a rollout's own timing is valid while its uplink lateness p99 and the error "
        "bound of every reply onset and latency stay within this (default 5; recorded in the "
        "manifest; docs/pacing.md)",
    )
    p.add_argument(
        "--loop-lag-max-ms",
        type=float,
        default=default("loop_lag_max_ms"),
        help="a received chunk whose arrival stamp may be this late (the event loop's lag "
        "at its arrival) makes a rollout's timing not valid (default 20: one frame)",
    )
    p.add_argument(
        "--arrival-stamps",
        choices=["kernel", "loop"],
        default=default("arrival_stamps"),
        help="WebSocket arrival stamps: kernel (default: the kernel's receive time of each "
        "read, exact whatever the event loop was doing, on Linux over plain TCP; on uvloop "
        "the rig reads the socket itself for it, ~3-5 µs more per message received; the "
        "loop's stamp elsewhere) or loop (always the loop's, bounded by its lag: to compare, "
        "or the cheapest reads at the edge of capacity); what was used is in each rollout's "
        "metrics (docs/pacing.md)",
    )
    p.add_argument(
        "--retry-invalid",
        type=int,
        metavar="N",
        default=default("retry_invalid"),
        help="run a rollout again, up to N more times, when its own timing was not valid (a "
        "stalled loop, a paused machine); each earlier attempt is kept as <id>.failed-K and "
        "counted as a retry; a resume with N > 0 redoes invalid rollouts too (default 0)",
    )
    p.add_argument(
        "--host-watch",
        action="store_true",
        default=default("host_watch"),
        help="watch the machine itself while the run streams: one observer per CPU at "
        "real-time priority above the rig's; a flagged rollout's late frames are matched to "
        "the pauses of the whole machine (host_pauses.json; docs/pacing.md)",
    )


def add_engine_options(g: Any) -> None:
    g.add_argument(
        "--engine",
        choices=["local", "ray"],
        default=default("engine"),
        help="local (this process) or ray: one shard per Ray task, merged on return",
    )
    g.add_argument("--ray-address", help="Ray cluster to join (default: start a local Ray)")
    g.add_argument("--shards", type=int, help="shards (default: cluster CPUs / cpus per shard)")
    g.add_argument(
        "--ray-cpus-per-shard",
        type=float,
        default=default("ray_cpus_per_shard"),
        help="CPUs each shard asks Ray for (default 2: a core pair per audio loop)",
    )
    g.add_argument(
        "--results",
        choices=["auto", "shared", "object-store"],
        default=default("results"),
        help="how shard results reach --out: shared (every node mounts --out at the same "
        "path), object-store (through Ray, rollout by rollout as they end), auto (shared "
        "where a node sees the driver's --out, else object-store; the default)",
    )
    g.add_argument(
        "--fleet-listen",
        default=default("fleet_listen"),
        metavar="HOST:PORT",
        help="where the driver takes the shards' live telemetry (default 127.0.0.1, a free "
        "port; a cluster: an address the nodes reach, e.g. 0.0.0.0:0)",
    )
