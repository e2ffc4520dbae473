"""The small frozen records a RunConfig is made of, one per concern (rig.runs.config).

Each option is one field: `opt(default, "--flag", kind)` keeps its default (the CLI
parser's `default=` reads it) and its flag and kind (the API's checks read them).
Standard library and the core's small records only: the CLI imports this for its parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rig.core.sessionconfig import SessionConfig
from rig.extras import BACKENDS
from rig.shard import Shard

#: `--concurrency` / `--workers`: a number or "auto"
AUTO = "auto"


def opt(default: Any, flag: str, kind: Any = None, *, choices: tuple[Any, ...] = ()) -> Any:
    """A config field that is an option: its flag and its kind (for the API's type checks)."""
    kind = kind if kind is not None else type(default)
    meta = {"flag": flag, "kind": kind, "choices": choices}
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class Target:
    """The system and how to reach it."""

    target: str | None = opt(None, "--target", str)  # ws://host:port/path (not for device)
    transport: str = opt("ws", "--transport", choices=("ws", "webrtc", "device"))
    dialect: str = opt("rig", "--dialect")
    #: `--dialect-opt KEY=VALUE`, parsed (values JSON where they parse)
    dialect_opt: Mapping[str, Any] = opt({}, "--dialect-opt", list)
    sample_rate: int | None = opt(None, "--sample-rate", int)
    #: WebSocket arrival stamps: "kernel" (the kernel's receive time where the platform gives
    #: it, else the loop's: rig.transports.kstamp) or "loop" (always the loop's; to compare)
    arrival_stamps: str = opt("kernel", "--arrival-stamps", choices=("kernel", "loop"))


@dataclass(frozen=True, kw_only=True)
class SessionOptions:
    """The run's session knobs (each item may override them: rig.scenarios)."""

    frame_ms: float | None = opt(None, "--frame-ms", float)  # None: the dialect's own, else 20
    drain_quiet_s: float = opt(1.5, "--drain-quiet-s")
    max_s: float = opt(120.0, "--max-s")
    probe_interval_s: float = opt(0.5, "--probe-interval-s")
    path_interval_s: float = opt(1.0, "--path-interval-s")
    #: `--echo SPEC`: the system hears its own reply (rig.echo.spec; an item's `echo` wins)
    echo: str | None = opt(None, "--echo", str)
    #: frames sent from the loop's one shared tick where the transport can (rig.sessiontick);
    #: False (`--no-tick`): one timer wake-up and task step per stream per frame
    tick: bool = opt(True, "--no-tick")

    def session_config(self, overrides: Mapping[str, Any] | None = None) -> SessionConfig:
        """One rollout's settings: these under the item's own; an echo its frames cannot
        make is refused here, before anything streams (a bad spec: ConfigError)."""
        base: dict[str, Any] = dict(
            frame_ms=self.frame_ms if self.frame_ms is not None else 20.0,
            drain_quiet_s=self.drain_quiet_s,
            max_s=self.max_s,
            probe_interval_s=self.probe_interval_s,
            path_interval_s=self.path_interval_s,
            tick=self.tick,
        )
        if self.echo:
            from rig.echo.spec import EchoSpec

            base["echo"] = EchoSpec.parse(self.echo).text  # its canonical form
        base.update(overrides or {})
        cfg = SessionConfig(**base)
        check_echo(cfg.echo, cfg.frame_ms)
        return cfg


def check_echo(echo: str | None, frame_ms: float) -> None:
    """Refuse an echo delay the rollout's frames cannot make (rig.echo.spec); a room needs
    its extra, asked for here, before anything streams."""
    if echo:
        from rig.echo.spec import EchoSpec, check_delay
        from rig.extras import require

        spec = EchoSpec.parse(echo)
        check_delay(spec, frame_ms)
        if spec.room is not None:
            require("room", f"--echo room={spec.room}")


@dataclass(frozen=True, kw_only=True)
class Scale:
    """How many at once, in how many processes, which slice."""

    concurrency: int | str = opt(1, "--concurrency", "int|auto")
    connect_concurrency: int = opt(8, "--connect-concurrency")
    workers: int | str = opt(AUTO, "--workers", "int|auto")
    repeat: int = opt(1, "--repeat")
    #: run a rollout again, up to this many more times, when its own timing failed
    #: (timing_valid false: a stalled loop, a paused machine); earlier attempts are kept
    retry_invalid: int = opt(0, "--retry-invalid")
    #: observers of the machine itself beside the run (rig.hostwatch): host_pauses.json
    host_watch: bool = opt(False, "--host-watch")
    rt_priority: int = opt(3, "--rt-priority")
    loop: str = opt("asyncio", "--loop", choices=("asyncio", "uvloop"))
    shard: Shard | None = opt(None, "--shard", Shard)


@dataclass(frozen=True, kw_only=True)
class Engine:
    """Where the shards run (`--engine ray`: docs/scale-out.md)."""

    engine: str = opt("local", "--engine", choices=("local", "ray"))
    ray_address: str | None = opt(None, "--ray-address", str)
    shards: int | None = opt(None, "--shards", int)
    ray_cpus_per_shard: float = opt(2.0, "--ray-cpus-per-shard")
    results: str = opt("auto", "--results", choices=("auto", "shared", "object-store"))
    fleet_listen: str = opt("127.0.0.1:0", "--fleet-listen")


@dataclass(frozen=True, kw_only=True)
class Output:
    """Where the run is written and what is added after the stream."""

    out: str = opt("recordings", "--out")
    run_id: str | None = opt(None, "--run-id", str)
    seed: int = opt(0, "--seed")
    force_resume: bool = opt(False, "--force-resume")
    asr_model: str | None = opt(None, "--asr-model", str)
    otel: bool = opt(False, "--otel")
    #: the command line recorded in the manifest (None: this process's)
    argv: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class Live:
    """What is shown and published while the run streams."""

    headless: bool = opt(False, "--headless")
    mqtt: str | None = opt(None, "--mqtt", str)
    detail: str | None = opt(None, "--detail", str)
    progress_interval_s: float = opt(10.0, "--progress-interval-s")
    device_clock: str | None = opt(None, "--device-clock", str)
    device_probe_interval_s: float = opt(0.5, "--device-probe-interval-s")
    #: HOST:PORT of the driver that collects a shard's or worker's telemetry
    fleet_feed: str | None = None


@dataclass(frozen=True, kw_only=True)
class Device:
    """The sound card (`--transport device`)."""

    output: str | None = opt(None, "--output", str)
    input: str | None = opt(None, "--input", str)
    backend: str = opt("sounddevice", "--backend", choices=tuple(sorted(BACKENDS)))
    channels: int = opt(1, "--channels")
    blocksize: int = opt(0, "--blocksize")
    latency: str = opt("high", "--latency")
    duplex: bool = opt(False, "--duplex")
    calibration: str = opt("auto", "--calibration")
    #: `--cancel-own-echo [auto|FILE]`: the rig's own playback removed from the capture
    cancel_own_echo: str | None = opt(None, "--cancel-own-echo", str)
    #: a noise scene on a second output (all three, or none: rig.device.roomopts)
    noise_device: str | None = opt(None, "--noise-device", str)
    noise: str | None = opt(None, "--noise", str)
    noise_level_dbfs: float | None = opt(None, "--noise-level-dbfs", float)


@dataclass(frozen=True, kw_only=True)
class Role:
    """Where this process stands in a run (not part of the run: never in the manifest's
    config). The parent of `--workers N` and an engine's driver hand it to their children."""

    worker_index: int | None = None  # one of `workers` worker processes
    workers: int = 1
    parent_pid: int | None = None  # die with it (rig.childproc)
    start_fd: int | None = None  # stream once every worker is ready (StartBarrier)
    node_id: str | None = None  # an engine's shard: the node, written into metrics.json

    @property
    def is_worker(self) -> bool:
        return self.worker_index is not None


#: records and their field in RunConfig, in the order options are listed
SECTIONS: dict[str, type[Any]] = {
    "target": Target,
    "session": SessionOptions,
    "scale": Scale,
    "engine": Engine,
    "output": Output,
    "live": Live,
    "device": Device,
}
