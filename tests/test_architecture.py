"""The shape of the package (docs/architecture.md), checked on the source itself.

- the import graph of rig/ has no cycle, and nothing imports from a higher layer;
- imports sit at module top, except those of optional extras (and modules that need one),
  and in rig.cli, whose commands import what they run inside `run()` (building the parser
  imports every command module: `rig --help` and a bare install stay light);
- no module is longer than MAX_LINES;
- only rig/clock/ reads the system clock: everything else is handed a Clock or a time.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rig"
MAX_LINES = 500

#: layers, lowest first: a module may import from its own package and from lower layers;
#: packages side by side in one layer never import each other
LAYERS: list[tuple[str, ...]] = [
    ("rig.version",),  # __version__, the ground floor: it imports nothing
    ("rig", "rig.errors"),  # `rig`: the package root alone (re-exports; __version__)
    # secrets, untrusted JSON, ranges, ids, shard assignment, the status table
    ("rig.redact", "rig.safejson", "rig.limits", "rig.ids", "rig.shard", "rig.aio", "rig.status"),
    # a /proc file read keeping the GIL (the loop thread's own samples); the kernel's
    # real-time budget
    ("rig.procread", "rig.rtbudget"),
    ("rig.audio", "rig.extras"),  # PCM helpers and sources; the table of optional extras
    ("rig.core",),  # sans-I/O conversation model: events, pacer, director, listener, ...
    # runtime clocks, peer-clock fits, wire; input conditions (level, noise, line); the echo
    # condition and canceller
    ("rig.clock", "rig.clockfit", "rig.protocol", "rig.conditions", "rig.echo"),
    ("rig.dialects", "rig.recordings", "rig.analysis", "rig.device", "rig.telemetry", "rig.net"),
    ("rig.transports", "rig.scenarios", "rig.reporting", "rig.dashboard", "rig.scoring"),
    ("rig.loopwatch", "rig.sendwatch"),  # loop-lag and blocked-send watchdogs (same layer)
    ("rig.sessionlink",),  # a rollout's sends under deadlines, listening loops and close
    ("rig.sessiontick", "rig.sessionchores"),  # its frames and its probes/path samples
    # sent from the loop's shared tick (siblings: neither imports the other)
    ("rig.session", "rig.realtime", "rig.childproc", "rig.sim"),  # asyncio shells
    ("rig.hostwatch",),  # observers of the machine itself (--host-watch; dies with the run)
    # the proxy (a rollout per connection); the relay process; shards merged, Ray
    ("rig.proxy", "rig.relay", "rig.scaleout"),
    # a run as a library object: RunConfig, specs, runner, workers, engine, live side
    ("rig.runs",),
    # the two front-ends of a run, siblings that never import each other: `rig ...` and
    # rig.run / rig.run_async / rig.load_run
    ("rig.cli", "rig.api"),
    ("rig.__main__",),
]
#: the front-ends: clients of the library, never of each other
FRONT_ENDS = ("rig.cli", "rig.api")
#: rig.runs modules the CLI imports when it builds its parser (option defaults, --impair):
#: like rig.cli itself, they import what a check needs inside the function
PARSER_TIME = ("rig.runs.config", "rig.runs.records", "rig.runs.sweep", "rig.runs.relays")
#: imported inside functions on purpose: optional extras, and rig modules that need one
LAZY_OK = {
    "aiortc",  # extra: webrtc
    "av",  # extra: webrtc (Opus for Moshi)
    "sounddevice",  # extra: device
    "pyaudio",  # extra: pyaudio
    "aiomqtt",  # extra: mqtt
    "matplotlib",  # extra: plot
    "pandas",  # extra: analysis
    "opentelemetry",  # extra: otel
    "faster_whisper",  # extra: asr
    "ray",  # extra: ray
    "uvloop",  # extra: uvloop
    "pyloudnorm",  # extra: conditions
    "parselmouth",  # extra: conditions
    "scipy",  # extra: conditions
    "colorednoise",  # extra: conditions
    "pyroomacoustics",  # extra: room
    "speexdsp",  # extra: aec
    "termios",  # POSIX terminals only (the live view's key handling)
    "tty",
    "rig.transports.webrtc",  # imports aiortc
    "rig.sim.webrtc_server",  # imports aiortc
    "rig.scaleout.ray_engine",  # imports ray
    "rig.reporting.otel",  # imports opentelemetry
}

#: the package root re-exports the public API (rig.run, rig.load_run, ...) on first use
#: (PEP 562 `__getattr__`): an import edge the layers allow, and not a cycle at import time
LAZY_REEXPORT = ("rig", "rig.api")


def _reexport(mod: str, dep: str | None) -> bool:
    root, api = LAZY_REEXPORT
    return mod == root and dep is not None and (dep == api or dep.startswith(api + "."))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The rig module an import names (a module, or a package's __init__), if any."""
    mods = _modules()
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def _imports(module: str) -> tuple[tuple[str, bool, int], ...]:
    """(imported name, inside a function?, line) for every import in `module`."""
    tree = ast.parse(_modules()[module].read_text())
    out: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                out.extend((a.name, nested, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                base = child.module
                out.append((base, nested, child.lineno))
                # `from rig.x import y` may name a module y
                out.extend((f"{base}.{a.name}", nested, child.lineno) for a in child.names)
            visit(child, inner)

    visit(tree, False)
    return tuple(out)


def _rig_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for mod in _modules():
        deps = {_resolve(name) for name, _, _ in _imports(mod) if name.split(".")[0] == "rig"}
        edges[mod] = {d for d in deps if d is not None and d != mod and not _reexport(mod, d)}
    return edges


def _layer(module: str) -> tuple[int, str]:
    """(layer index, the layer entry it belongs to): the longest matching entry wins."""
    best: tuple[int, str] | None = None
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            inside = module == entry or (entry != "rig" and module.startswith(entry + "."))
            if inside and (best is None or len(entry) > len(best[1])):
                best = (i, entry)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and the docs)"
    return best


def test_every_module_has_a_layer() -> None:
    for mod in _modules():
        _layer(mod)


def test_no_import_cycles() -> None:
    edges = _rig_edges()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d) :] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                walk(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            walk(m)


def test_nothing_imports_from_a_higher_layer_or_a_sibling_package() -> None:
    bad = []
    for mod, deps in sorted(_rig_edges().items()):
        rank, entry = _layer(mod)
        for dep in sorted(deps):
            dep_rank, dep_entry = _layer(dep)
            if dep_entry == entry:
                continue  # its own package
            if dep_rank >= rank:
                bad.append(f"{mod} (layer {rank}) imports {dep} (layer {dep_rank})")
    assert bad == [], "\n".join(bad)


def test_imports_sit_at_module_top_unless_an_extra_needs_them_lazily() -> None:
    bad = []
    for mod in sorted(_modules()):
        if mod == "rig.cli" or mod.startswith("rig.cli.") or mod in PARSER_TIME:
            continue  # commands import their stack in run() (docs/architecture.md)
        for name, nested, line in _imports(mod):
            if not nested:
                continue
            head = name.split(".")[0]
            allowed = head in LAZY_OK or any(
                name == ok or name.startswith(ok + ".") for ok in LAZY_OK
            )
            if _reexport(mod, _resolve(name)):
                continue
            if not allowed and not (head == "rig" and _resolve(name) is None):
                bad.append(f"{mod}:{line} imports {name} inside a function")
    assert bad == [], "\n".join(bad)


def test_the_cli_and_the_api_never_import_each_other() -> None:
    bad = []
    for mod, deps in sorted(_rig_edges().items()):
        mine = next((f for f in FRONT_ENDS if mod == f or mod.startswith(f + ".")), None)
        for dep in deps:
            other = next((f for f in FRONT_ENDS if dep == f or dep.startswith(f + ".")), None)
            if mine is not None and other is not None and other != mine:
                bad.append(f"{mod} imports {dep}")
    assert bad == [], "\n".join(bad)


def test_only_the_cli_reads_a_run_namespace() -> None:
    """A run is a RunConfig below the CLI: no `getattr(args, ...)` probes anywhere in rig/
    (the CLI turns its Namespace into a RunConfig in one function, rig.cli.runopts)."""
    bad = [
        f"{mod}:{n}"
        for mod, path in sorted(_modules().items())
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "getattr(args" in line
    ]
    assert bad == [], bad


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, long


CLOCK_READS = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}


def test_only_the_clock_package_reads_the_system_clock() -> None:
    bad = []
    for mod, path in sorted(_modules().items()):
        if mod == "rig.clock" or mod.startswith("rig.clock."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "time"
                and node.attr in CLOCK_READS
            ):
                bad.append(f"{mod}:{node.lineno} time.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "time":
                bad += [f"{mod}:{node.lineno} from time import {a.name}" for a in node.names]
    assert bad == [], "\n".join(bad)


#: names defined in exactly one module (everyone else imports them from there)
ONE_HOME = {"NS_PER_S": "rig.core.units", "NS_PER_MS": "rig.core.units", "Pcm16": "rig.audio.pcm"}


def test_units_and_pcm16_are_defined_once() -> None:
    homes: dict[str, list[str]] = {name: [] for name in ONE_HOME}
    for mod, path in sorted(_modules().items()):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in homes:
                    homes[t.id].append(mod)
    assert homes == {name: [home] for name, home in ONE_HOME.items()}
