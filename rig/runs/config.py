"""A run, as one frozen value: what `rig run`, `rig demo` and `rig.run` ask for.

How this works: `RunConfig` is keyword-only and made of small frozen records, one per
concern (the target, the session knobs, the timing tolerance, scale, the engine, the output,
the live side, the sound card). Each option is one field whose metadata names its flag and
kind; the CLI builds a config from its Namespace (rig.cli.runopts: the one function that
reads it) and takes its parser defaults from these fields, the API from keywords
(`from_options`, with the did-you-mean hint). Both end in `check()`: every cross-option
rule, one-line `ConfigError`s, before anything is opened or written. `describe()` writes the
manifest's `config` block, the one place it is assembled. Worker processes and engine shards
get the config as JSON (`to_json` / `from_json`), never a command line to parse again.

Adding an option: a field in its record here (`opt(default, "--flag")`), a line in the
parser (rig.cli.runopts, `default=` from the field), its range or cross-check in `check()`
if it has one, and its key in `describe()` if the manifest records it (docs/architecture.md).

Standard library and the core's small records only at module level: the CLI imports this
when it builds its parser.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rig import safejson
from rig.core.selfcheck import TimingTolerance
from rig.errors import ConfigError
from rig.extras import BACKENDS, DIALECTS, TRANSPORTS, require
from rig.ids import check_id
from rig.limits import bounded, local_rate
from rig.redact import redact_url
from rig.runs.records import (
    AUTO,
    SECTIONS,
    Device,
    Engine,
    Live,
    Output,
    Role,
    Scale,
    SessionOptions,
    Target,
    opt,
)
from rig.runs.sweep import parse_sweep
from rig.shard import Shard, parse_shard


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One run: everything `rig run` / `rig demo` / `rig.run` asked for, checked."""

    command: str = "run"
    scenario: str = ""
    target: Target = field(default_factory=Target)
    session: SessionOptions = field(default_factory=SessionOptions)
    tolerance: TimingTolerance = field(default_factory=TimingTolerance)
    scale: Scale = field(default_factory=Scale)
    engine: Engine = field(default_factory=Engine)
    output: Output = field(default_factory=Output)
    live: Live = field(default_factory=Live)
    device: Device = field(default_factory=Device)
    impair: str | None = opt(None, "--impair", str)  # the `--impair` spec (rig.net.impair)
    sweep: tuple[str, ...] = opt((), "--sweep", list)  # `KEY=V1,V2,...` each
    #: `--condition KEY=VALUE,...` each: an input condition for every turn (rig.conditions)
    condition: tuple[str, ...] = opt((), "--condition", list)
    #: what a command adds to the manifest's config block (rig demo: the reference system)
    extra: Mapping[str, Any] = field(default_factory=dict)

    # -- building ------------------------------------------------------------------------

    @classmethod
    def from_options(cls, options: Mapping[str, Any], **top: Any) -> RunConfig:
        """A config from flat option names (the parser's dests: `max_s`, `dialect_opt`,
        `timing_tolerance_ms`, ...), as the CLI's Namespace and the API's keywords give them.
        Values must already have their kinds (`check_kind`); absent names keep defaults."""
        parts: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        tolerance = TimingTolerance()
        rest: dict[str, Any] = dict(top)
        for name, value in options.items():
            if name == "timing_tolerance_ms" and value is not None:
                tolerance = dataclasses.replace(tolerance, lateness_p99_ms=value, figure_ms=value)
            elif name == "loop_lag_max_ms" and value is not None:
                tolerance = dataclasses.replace(tolerance, loop_lag_max_ms=value)
            elif name in ("impair", "sweep", "condition", "scenario"):
                rest[name] = tuple(value or ()) if name in ("sweep", "condition") else value
            elif (section := OPTION_SECTION.get(name)) is not None:
                if name == "dialect_opt":
                    value = parse_dialect_options(value)
                elif name == "shard" and value is not None and not isinstance(value, Shard):
                    value = parse_shard(value)
                parts[section][name] = value
        records = {name: SECTIONS[name](**kw) for name, kw in parts.items()}
        return cls(tolerance=tolerance, **records, **rest)

    def replace(self, **changes: Any) -> RunConfig:
        """This config with whole fields or `section__field` values changed."""
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            section, sep, name = key.partition("__")
            if sep:
                nested.setdefault(section, {})[name] = value
            else:
                top[key] = value
        for section, kw in nested.items():
            top[section] = dataclasses.replace(getattr(self, section), **kw)
        return dataclasses.replace(self, **top)

    def run_condition(self) -> Any:
        """`--condition`, parsed (rig.conditions.Condition), or None (a bad one: ConfigError)."""
        if not self.condition:
            return None
        from rig.conditions import parse_cli

        return parse_cli(list(self.condition))

    def run_condition_dict(self) -> dict[str, Any] | None:
        cond = self.run_condition()
        return None if cond is None else dict(cond.as_dict())

    # -- checking ------------------------------------------------------------------------

    def check(self) -> None:
        """Every cross-option rule and range, before anything is opened or written: a typo
        (`--max-s 1e300`, `--concurrency 0`, `--run-id ../../x`) is a clear one-line error,
        never a MemoryError, a silent clamp or a directory outside `--out`."""
        check_config(self)

    # -- describing ----------------------------------------------------------------------

    def describe(
        self,
        *,
        sample_rate: int | None = None,
        session: Mapping[str, Any] | None = None,
        headless: bool | None = None,
        impair: Mapping[str, Any] | None = None,
        role: Role | None = None,
    ) -> dict[str, Any]:
        """The manifest's `config` block of this run (what the runner adds of its own is in
        `RunnerSettings.describe`): resolved facts (the uplink rate, the first rollout's
        session, whether the live view drew, the relay) come in as arguments."""
        out: dict[str, Any] = {"command": self.command}
        if self.command == "run":
            out.update(
                scenario=self.scenario,
                transport=self.target.transport,
                dialect=self.target.dialect,
                dialect_options=dict(self.target.dialect_opt),
                sweep=parse_sweep(list(self.sweep)),
                condition=self.run_condition_dict(),
                sample_rate=sample_rate,
            )
        out.update(self.extra)
        out["session"] = dict(session or {})
        if self.output.asr_model:
            out["asr_model"] = self.output.asr_model
        if role is not None and role.is_worker:  # the run's totals, not this worker's share
            out["concurrency"] = self.scale.concurrency
            out["connect_concurrency"] = self.scale.connect_concurrency
        out["mqtt"] = bool(self.live.mqtt)
        if self.scale.host_watch:
            out["host_watch"] = True
        if headless is not None:
            out["headless"] = headless
        if impair:
            out["impair"] = dict(impair)
        return out

    def describe_sharded(self) -> dict[str, Any]:
        """What the parent of `--workers N` sets over its workers' merged config block."""
        return {
            "concurrency": self.scale.concurrency,
            "connect_concurrency": self.scale.connect_concurrency,
            "workers": self.scale.workers,
            "mqtt": bool(self.live.mqtt),
        }

    # -- the wire to worker processes and shards -----------------------------------------

    def to_json(self) -> str:
        """The config as JSON (secrets included: it goes over a pipe, never to a file)."""
        return json.dumps(_plain(self))

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ConfigError("a run config must be a JSON object")
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name in SECTIONS:
                rec = dict(value)
                if f.name == "scale" and rec.get("shard") is not None:
                    rec["shard"] = Shard(**rec["shard"])
                if f.name == "output" and rec.get("argv") is not None:
                    rec["argv"] = tuple(rec["argv"])
                value = SECTIONS[f.name](**rec)
            elif f.name == "tolerance":
                value = TimingTolerance(**value)
            elif f.name in ("sweep", "condition"):
                value = tuple(value)
            kw[f.name] = value
        return cls(**kw)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _option_fields() -> dict[str, tuple[str | None, dataclasses.Field[Any]]]:
    out: dict[str, tuple[str | None, dataclasses.Field[Any]]] = {}
    for section, record in SECTIONS.items():
        for f in dataclasses.fields(record):
            if "flag" in f.metadata:
                out[f.name] = (section, f)
    for f in dataclasses.fields(RunConfig):
        if "flag" in f.metadata:
            out[f.name] = (None, f)
    return out


#: rollouts at once in `rig demo`, and `rig.run`'s default (a run of its three in ~7 s)
DEMO_CONCURRENCY = 3

#: every option by its flat name: (its record in RunConfig or None for a top field, field)
OPTION_FIELDS = _option_fields()
OPTION_SECTION = {name: s for name, (s, _) in OPTION_FIELDS.items() if s is not None}
#: options that are not a record field (they set the timing tolerance)
TOLERANCE_OPTIONS = {
    "timing_tolerance_ms": "--timing-tolerance-ms",
    "loop_lag_max_ms": "--loop-lag-max-ms",
}
#: API spellings that differ from the flat name
ALIASES = {"dialect_options": "dialect_opt", "out_dir": "out"}


def default(name: str) -> Any:
    """The default of an option by its flat name (the CLI parser's `default=`)."""
    if name == "timing_tolerance_ms":
        return TimingTolerance().lateness_p99_ms
    if name == "loop_lag_max_ms":
        return TimingTolerance().loop_lag_max_ms
    _, f = OPTION_FIELDS[name]
    if f.default_factory is not dataclasses.MISSING:
        return None  # a list option: absent
    return None if name in ("sweep", "condition") else f.default


def flag(name: str) -> str:
    if name in TOLERANCE_OPTIONS:
        return TOLERANCE_OPTIONS[name]
    return str(OPTION_FIELDS[name][1].metadata["flag"])


def int_or_auto(value: str) -> int | str:
    """`--concurrency` and `--workers`: N or `auto` (N is range-checked in `check()`)."""
    if value.strip().lower() == AUTO:
        return AUTO
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"an integer or auto, not {value!r}") from None


def parse_dialect_options(pairs: Any) -> dict[str, Any]:
    """`--dialect-opt KEY=VALUE` pairs; values are JSON where they parse (numbers, true,
    null, lists), plain strings otherwise. Credentials never go here: they come from env."""
    if isinstance(pairs, Mapping):
        return dict(pairs)
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--dialect-opt wants KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = safejson.parse(value)
        except ValueError:  # not JSON (or NaN, 10^5-deep...): the plain string
            out[key.strip()] = value
    return out


# -- RunConfig.check(): every range and cross-option rule, one line each ------------------

#: (flag, value getter, lo, hi) of the integer options (`auto` passes)
_INTS: tuple[tuple[str, Callable[[RunConfig], Any], int, int], ...] = (
    ("--concurrency", lambda c: c.scale.concurrency, 1, 100_000),
    ("--connect-concurrency", lambda c: c.scale.connect_concurrency, 1, 100_000),
    ("--repeat", lambda c: c.scale.repeat, 1, 1_000_000),
    ("--retry-invalid", lambda c: c.scale.retry_invalid, 0, 100),
    ("--rt-priority", lambda c: c.scale.rt_priority, 0, 99),
    ("--workers", lambda c: c.scale.workers, 1, 256),
)
_FLOATS: tuple[tuple[str, Callable[[RunConfig], Any], float, float], ...] = (
    ("--frame-ms", lambda c: c.session.frame_ms, 2.5, 1000.0),
    ("--drain-quiet-s", lambda c: c.session.drain_quiet_s, 0.0, 3600.0),
    ("--max-s", lambda c: c.session.max_s, 0.001, 86_400.0),
    ("--probe-interval-s", lambda c: c.session.probe_interval_s, 0.0, 3600.0),
    ("--timing-tolerance-ms", lambda c: c.tolerance.lateness_p99_ms, 0.01, 60_000.0),
    ("--loop-lag-max-ms", lambda c: c.tolerance.loop_lag_max_ms, 0.01, 60_000.0),
    ("--path-interval-s", lambda c: c.session.path_interval_s, 0.0, 3600.0),
    ("--device-probe-interval-s", lambda c: c.live.device_probe_interval_s, 0.001, 3600.0),
    ("--progress-interval-s", lambda c: c.live.progress_interval_s, 0.0, 86_400.0),
)


def check_config(config: RunConfig) -> None:
    check_ranges(config)
    if config.scale.loop == "uvloop":
        require("uvloop", "--loop uvloop")
    config.run_condition()  # a bad --condition is a one-line error before anything runs
    if config.session.echo:
        from rig.echo.spec import EchoSpec

        EchoSpec.parse(config.session.echo)
    if config.scale.host_watch and config.engine.engine != "local":
        raise ConfigError("--host-watch watches this machine: not with --engine ray")
    if config.live.device_clock and not config.live.mqtt:
        raise ConfigError("--device-clock needs --mqtt URL (the device answers over MQTT)")
    from rig.device.roomopts import check_room_options

    d = config.device
    check_room_options(
        config.target.transport, d.cancel_own_echo, d.noise_device, d.noise, d.noise_level_dbfs
    )
    if config.command == "demo":
        if config.scale.workers not in ("auto", 1):  # its reference system runs here
            raise ConfigError("rig demo runs in one process: --workers is for rig run")
        require_extras(config)
        return
    check_engine(config)
    require_extras(config)
    if config.output.otel:
        otel_endpoint()  # checked before anything streams
    if config.target.transport != "device" and not config.target.target:
        raise ConfigError(f"--transport {config.target.transport} needs --target URL")


def check_ranges(config: RunConfig) -> None:
    """Range checks: a typo is a clear error, never a MemoryError or a silent clamp."""
    if config.output.run_id is not None:
        check_id(config.output.run_id, "--run-id")
    for flag, get, lo, hi in _INTS:
        v = get(config)
        if v is not None and v != "auto" and not lo <= v <= hi:
            raise ConfigError(f"{flag} must be an integer in [{lo}, {hi}], got {v}")
    for flag, fget, flo, fhi in _FLOATS:
        fv = fget(config)
        if fv is not None:
            bounded(fv, flo, fhi, flag)
    if config.target.sample_rate is not None:
        local_rate(config.target.sample_rate, "--sample-rate")


def check_engine(config: RunConfig) -> None:
    """What an engine cannot do, and its ranges."""
    e = config.engine
    if e.engine == "local":
        if e.shards is not None or e.ray_address is not None:
            raise ConfigError("--shards and --ray-address go with --engine ray")
        if e.results != "auto" or e.fleet_listen != "127.0.0.1:0":
            raise ConfigError("--results and --fleet-listen go with --engine ray")
        return
    if config.scale.shard is not None:
        raise ConfigError("--engine ray plans the shards itself: drop --shard")
    if config.target.transport == "device":
        raise ConfigError("--engine ray runs rollouts on other nodes: not over this sound card")
    if e.shards is not None and not 1 <= e.shards <= 10_000:
        raise ConfigError(f"--shards must be in [1, 10000], got {e.shards}")
    if not 0.1 <= e.ray_cpus_per_shard <= 1024:
        raise ConfigError(
            f"--ray-cpus-per-shard must be in [0.1, 1024], got {e.ray_cpus_per_shard}"
        )
    from rig.telemetry.fleetlink import parse_address

    parse_address(e.fleet_listen, "--fleet-listen")
    require("ray", "--engine ray")


def require_extras(config: RunConfig) -> None:
    """Fail up front, in one line naming the extra, when an option needs one that is missing
    (before any rollout starts or any file is written)."""
    transport, dialect = config.target.transport, config.target.dialect
    if transport in TRANSPORTS:
        require(TRANSPORTS[transport], f"--transport {transport}")
    if transport == "device":
        backend = config.device.backend or "sounddevice"
        require(BACKENDS[backend], f"--transport device --backend {backend}")
    if transport == "ws" and dialect in DIALECTS:
        require(DIALECTS[dialect], f"--dialect {dialect}")
    if config.live.mqtt:
        require("mqtt", "--mqtt")
    if config.output.asr_model:
        require("asr", "--asr-model")


def otel_endpoint() -> str:
    """The OTLP endpoint from the standard variables (redacted), or a usage error."""
    require("otel", "--otel")
    endpoint = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    if not endpoint:
        raise ConfigError("--otel needs OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318)")
    return redact_url(endpoint)
