"""What a user installs works: the wheel, a bare install (no extras), the extras table.

The `install` tests build a wheel from this checkout and install it, with no extras, into a
fresh virtualenv (not the dev one): every command's help, `rig demo --headless`, `rig sim` +
`rig run` over WebSocket + `rig report`, `rig scenarios`; every module under rig/ imported
with only the base dependencies, failing exactly where rig/extras.py says; every option that
needs an extra refused in one line naming it, with exit status 2. The other tests check the
same promises cheaply in the dev environment (extras hidden from the import system).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig import __version__
from rig.cli import COMMANDS, EXIT_USAGE
from rig.extras import ALL, BACKENDS, DIALECTS, DIST, EXTRAS, MODULES, NOT_IN_ALL, TRANSPORTS
from tests.support.runexit import assert_run_ok

REPO = Path(__file__).resolve().parents[1]
INSTALLED = os.environ.get("RIG_TEST_INSTALLED") == "1"
HEAVY = {"numpy", "rich", "websockets", "soundfile", "soxr", "webrtcvad", "scipy"}
EXTRA_IMPORTS = {name for e in EXTRAS.values() for name in e.imports} | {"matplotlib"}
WAV = "turn_what.wav"

#: (argv after `rig`, the extra it must name); {wav} and {tmp} are filled in per test
NEEDS_EXTRA: list[tuple[list[str], str]] = [
    (["run", "{wav}", "--target", "http://127.0.0.1:9/offer", "--transport", "webrtc"], "webrtc"),
    (["run", "{wav}", "--transport", "device", "--output", "a", "--input", "b"], "device"),
    (
        ["run", "{wav}", "--transport=device", "--backend=pyaudio", "--output=a", "--input=b"],
        "pyaudio",
    ),
    (["run", "{wav}", "--target", "ws://127.0.0.1:9", "--dialect", "moshi"], "opus"),
    (["run", "{wav}", "--target", "ws://127.0.0.1:9", "--mqtt", "mqtt://127.0.0.1:9"], "mqtt"),
    (["demo", "--mqtt", "mqtt://127.0.0.1:9", "--out", "{tmp}"], "mqtt"),
    (["sim", "--transport", "webrtc", "--port", "0"], "webrtc"),
    (["sim", "--transport", "device", "--input", "a", "--output", "b"], "device"),
    (["devices"], "device"),
    (["devices", "--backend", "pyaudio"], "pyaudio"),
    (["calibrate", "--device", "x"], "device"),
    (["watch", "--mqtt", "mqtt://127.0.0.1:9"], "mqtt"),
    (["plot", "{tmp}"], "plot"),
]


def _fill(argv: list[str], wav: str, tmp: Path) -> list[str]:
    return [a.format(wav=wav, tmp=tmp) for a in argv]


def assert_names_extra(r: subprocess.CompletedProcess[str], extra: str, argv: list[str]) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == EXIT_USAGE, (argv, r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in r.stderr, (argv, r.stderr[-2000:])
    assert f"pip install '{DIST}[{extra}]'" in lines[0], (argv, lines[0])
    assert f"needs the {extra!r} extra" in lines[0], (argv, lines[0])


# -- cheap checks, in the dev environment ---------------------------------------------------


def test_building_the_parser_imports_nothing_heavy() -> None:
    """`rig --help` (and a bare install's `rig demo`) must not need any extra to start."""
    code = (
        "import sys; from rig.cli import build_parser; build_parser(); "
        "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(r.stdout))
    assert not loaded & (HEAVY | EXTRA_IMPORTS), loaded & (HEAVY | EXTRA_IMPORTS)


def test_extras_table_is_pyprojects() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST
    assert project["license"] == "Apache-2.0" and (REPO / "LICENSE").is_file()
    assert "version" in project["dynamic"] and "version" not in project
    optional = project["optional-dependencies"]
    for name, extra in EXTRAS.items():
        assert tuple(optional[name]) == extra.requires, name
    assert optional["all"] == [f"{DIST}[{','.join(ALL)}]"]
    assert "pyaudio" not in ALL  # builds from source: never in `all`
    assert set(ALL) == set(EXTRAS) - set(NOT_IN_ALL)
    assert set(optional) == set(EXTRAS) | {"all", "dev"}
    assert not any(r.startswith("scipy") for r in project["dependencies"])


def _table_names(markdown: str) -> set[str]:
    """First-column names (`name`) of the markdown table whose header starts `| extra |`."""
    table = markdown[markdown.index("\n| extra |") :].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([a-z]+)` \|", table, re.M))


def test_docs_list_the_extras() -> None:
    readme = (REPO / "README.md").read_text()
    assert _table_names(readme) == set(EXTRAS)
    assert f"pip install '{DIST}[device]'" in readme
    install = (REPO / "docs" / "install.md").read_text()
    assert _table_names(install) == set(EXTRAS) | {"all", "dev"}


def test_cli_choices_are_the_codes() -> None:
    from rig.cli.calibrate import PROBES
    from rig.device.loopback import PROBES as CODE_PROBES
    from rig.device.stream import BACKENDS as CODE_BACKENDS
    from rig.dialects import DIALECTS as CODE_DIALECTS

    assert tuple(PROBES) == tuple(CODE_PROBES)
    assert set(BACKENDS) == set(CODE_BACKENDS)
    assert set(DIALECTS) <= set(CODE_DIALECTS)
    assert set(TRANSPORTS) <= {"ws", "webrtc", "device"}
    assert set(MODULES.values()) <= set(EXTRAS)


def test_version_is_single_sourced() -> None:
    import importlib.metadata

    assert importlib.metadata.version(DIST) == __version__
    r = subprocess.run(
        [sys.executable, "-m", "rig", "--version"], capture_output=True, text=True, check=True
    )
    assert r.stdout.strip() == f"rig {__version__}"


def test_missing_extras_are_one_line_errors(tmp_path: Path) -> None:
    """Each extra hidden from the import system (None in sys.modules) in turn: every option
    that needs it is refused in one line naming it, exit 2, before anything is written."""
    wav = str(REPO / "rig" / "data" / WAV)
    for argv, extra in NEEDS_EXTRA:
        argv = _fill(argv, wav, tmp_path / "out")
        code = (
            "import sys\n"
            f"for name in {list(EXTRAS[extra].imports)!r}: sys.modules[name] = None\n"
            "from rig.cli import main\n"
            f"sys.exit(main({argv!r}))\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert_names_extra(r, extra, argv)
    assert not (tmp_path / "out").exists()


def test_a_stray_missing_extra_module_is_named_too(capsys: pytest.CaptureFixture[str]) -> None:
    """An import deep inside a command that no up-front check caught still gets one line."""
    from rig.cli import _report_error
    from rig.errors import DeviceError

    try:
        try:
            raise ModuleNotFoundError("No module named 'sounddevice'", name="sounddevice")
        except ModuleNotFoundError as exc:
            raise DeviceError(f"sounddevice is not usable: {exc}") from exc
    except DeviceError as exc:
        assert _report_error("devices", exc) == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"pip install '{DIST}[device]'" in line
    with pytest.raises(ModuleNotFoundError):  # not an extra's module: a bug, not hidden
        _report_error("devices", ModuleNotFoundError("x", name="no_such_dependency"))


def test_subprocesses_import_the_same_rig_as_the_tests() -> None:
    """Under RIG_TEST_INSTALLED `python -m rig` started from the repo root must not pick up
    ./rig (the source tree) instead of the installed package."""
    import rig

    r = subprocess.run(
        [sys.executable, "-c", "import rig; print(rig.__file__)"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    child = r.stdout.strip()
    if INSTALLED:
        for path in (rig.__file__, child):
            assert not Path(path).resolve().is_relative_to(REPO / "rig"), path
    assert Path(child).resolve() == Path(rig.__file__).resolve()


# -- a wheel in a fresh virtualenv, no extras ----------------------------------------------


class BareVenv:
    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.python = root / "venv" / "bin" / "python"
        self.rig_bin = root / "venv" / "bin" / "rig"

    def rig(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
        return subprocess.run(
            [str(self.rig_bin), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env=env,
        )

    def py(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "-P", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )

    @property
    def package(self) -> Path:
        r = self.py("-c", "import rig, os; print(os.path.dirname(rig.__file__))")
        assert r.returncode == 0, r.stderr
        return Path(r.stdout.strip())


def _source_copy(dest: Path) -> Path:
    """The checkout without build output, caches and virtualenvs: setuptools builds in the
    source directory, and a stale ./build would leak old files into the wheel."""
    top = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "recordings")
    anywhere = shutil.ignore_patterns("__pycache__", "*.pyc", ".*_cache", ".hypothesis")

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set(anywhere(directory, names))
        return skipped | set(top(directory, names)) if Path(directory) == REPO else skipped

    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def _pip(python: Path | str, *args: str) -> None:
    r = subprocess.run(
        [str(python), "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"pip {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BareVenv]:
    root = tmp_path_factory.mktemp("bare")
    src = _source_copy(root / "src")
    _pip(sys.executable, "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(src))
    (wheel,) = (root / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    env = BareVenv(root, wheel)
    _pip(env.python, "install", "-q", str(wheel))
    yield env


@pytest.mark.install
def test_wheel_metadata_and_files(bare: BareVenv) -> None:
    assert bare.wheel.name == f"rig_voice-{__version__}-py3-none-any.whl"
    r = bare.py("-c", f"import importlib.metadata as m; print(m.metadata({DIST!r}).as_string())")
    meta = r.stdout
    assert re.search(r"^License-Expression: Apache-2\.0$", meta, re.M), meta[:2000]
    assert re.search(rf"^Version: {re.escape(__version__)}$", meta, re.M)
    assert not re.search(r"^Requires-Dist: scipy[^;]*$", meta, re.M)  # only in the dev extra
    assert re.search(r"^Requires-Dist: av>=14; extra == \"opus\"$", meta, re.M)
    r = bare.py("-c", f"import importlib.metadata as m; print(*m.files({DIST!r}), sep='\\n')")
    files = set(r.stdout.split())
    assert any(f.endswith("licenses/LICENSE") or f.endswith("/LICENSE") for f in files), files
    # every source and data file of the checkout's rig/ is in the installed package
    installed = bare.package
    wanted = {
        p.relative_to(REPO / "rig")
        for p in (REPO / "rig").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    missing = sorted(str(p) for p in wanted if not (installed / p).is_file())
    assert not missing, f"not in the wheel: {missing}"
    # nothing but the declared base dependencies came with it
    r = bare.py("-m", "pip", "list", "--format=json", "--disable-pip-version-check")
    names = {d["name"].lower() for d in json.loads(r.stdout)}
    assert not names & {"aiortc", "av", "sounddevice", "pyaudio", "aiomqtt", "matplotlib"}
    assert "scipy" not in names


@pytest.mark.install
def test_every_module_imports_or_needs_a_documented_extra(bare: BareVenv) -> None:
    script = r"""
import importlib, json, os, sys
import rig
top = os.path.dirname(os.path.dirname(rig.__file__))
out = {}
for dirpath, dirs, files in os.walk(os.path.dirname(rig.__file__)):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for f in sorted(files):
        if not f.endswith(".py"):
            continue
        name = os.path.relpath(os.path.join(dirpath, f), top)[:-3].replace(os.sep, ".")
        name = name.removesuffix(".__init__")
        if name == "rig.__main__":  # runs the CLI when imported; `python -m rig` below
            continue
        before = set(sys.modules)
        try:
            importlib.import_module(name)
            out[name] = None
        except BaseException as exc:
            out[name] = (
                ["missing", exc.name] if type(exc) is ModuleNotFoundError else ["error", repr(exc)]
            )
            # as in a fresh process: drop what the failed import left behind (a package's
            # submodules imported before its __init__ failed)
            for leftover in set(sys.modules) - before:
                del sys.modules[leftover]
print(json.dumps(out))
"""
    r = bare.py("-c", script)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout)
    assert len(results) > 50 and "rig.cli.calibrate" in results
    failures = {name: res for name, res in results.items() if res is not None}
    errors = {name: res for name, res in failures.items() if res[0] != "missing"}
    assert not errors, errors
    assert set(failures) == set(MODULES), (
        "modules that need an extra differ from rig/extras.py MODULES: "
        f"undocumented {sorted(set(failures) - set(MODULES))}, "
        f"import fine {sorted(set(MODULES) - set(failures))}"
    )
    for name, (_, missing) in failures.items():
        assert missing.split(".")[0] in EXTRAS[MODULES[name]].imports, (name, missing)
    r = bare.py("-m", "rig", "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"rig {__version__}", r.stderr


@pytest.mark.install
def test_bare_install_every_command_helps(bare: BareVenv) -> None:
    r = bare.rig("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"rig {__version__}", r.stderr
    r = bare.rig("--help")
    assert r.returncode == 0 and all(c in r.stdout for c in COMMANDS), r.stdout + r.stderr
    for command in COMMANDS:
        r = bare.rig(command, "--help")
        assert r.returncode == 0 and "usage: rig " + command in r.stdout, (command, r.stderr)
    r = bare.rig()
    assert r.returncode == EXIT_USAGE  # no command: help, usage status
    r = bare.rig("run", "--no-such-option")
    assert r.returncode == EXIT_USAGE and "Traceback" not in r.stderr


@pytest.mark.install
@pytest.mark.realtime
def test_bare_install_runs_the_demo(bare: BareVenv) -> None:
    # A rerun starts from an empty run directory: `rig demo` rightly refuses to resume one
    # recorded against another sim port, which would hide why the first attempt failed.
    shutil.rmtree(bare.root / "out" / "demo", ignore_errors=True)
    r = bare.rig("demo", "--headless", "--out", "out", "--run-id", "demo", timeout=180)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    log = bare.root / "demo.log"
    log.write_text(r.stdout)
    check = bare.py(
        str(REPO / "scripts" / "ci" / "check_demo.py"), str(log), str(REPO / "README.md")
    )
    assert check.returncode == 0, check.stderr + r.stdout
    r = bare.rig("scenarios")
    assert r.returncode == 0 and "builtin:demo" in r.stdout, r.stderr
    r = bare.rig("scenarios", "builtin:timing", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["builtin:timing"], r.stderr


@pytest.mark.install
@pytest.mark.realtime
def test_bare_install_sim_run_report_over_websocket(bare: BareVenv) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    sim = subprocess.Popen(
        [str(bare.rig_bin), "sim", "--port", "0", "--truth-log", "truth.jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=bare.root,
        env=env,
    )
    try:
        assert sim.stdout is not None
        line = sim.stdout.readline()
        m = re.search(r"ws://\S+", line)
        assert m is not None, line
        wav = str(bare.package / "data" / WAV)
        r = bare.rig(
            "run", wav, "--target", m.group(0), "--headless", "--out", "out", "--run-id", "ws"
        )
        assert_run_ok(r.returncode, r.stderr + r.stdout, Path(bare.root) / "out" / "ws")
    finally:
        sim.terminate()
        sim.wait(10)
    assert sim.returncode == 0
    rep = bare.rig("report", "out/ws", "--json")
    assert rep.returncode == 0, rep.stderr
    (rollout,) = json.loads(rep.stdout)["rollouts"]
    assert rollout["status"] == "ok"
    (resp,) = rollout["responses"]
    assert 850 < resp["latency_ms"] < 960  # sim defaults: 500 ms endpointing + 400 ms model
    assert bare.rig("report", "out/ws").returncode == 0
    assert (bare.root / "truth.jsonl").stat().st_size > 0


@pytest.mark.install
def test_bare_install_names_the_extra_it_lacks(bare: BareVenv) -> None:
    (bare.root / "rollout").mkdir(exist_ok=True)
    wav = str(bare.package / "data" / WAV)
    for argv, extra in NEEDS_EXTRA:
        argv = _fill(argv, wav, bare.root / ("rollout" if argv[0] == "plot" else "x-out"))
        assert_names_extra(bare.rig(*argv), extra, argv)
    assert not (bare.root / "x-out").exists()
