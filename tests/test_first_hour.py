"""The first hour of a new user, in the order README.md shows it, with the installed `rig`:
each command prints what the README says it prints (and the usual first mistakes get one
clear line). Quick on purpose: a demo, one short rollout, its report, plot and HTML."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import rig, rig_argv

pytestmark = pytest.mark.realtime
REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _columns(text: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.strip().startswith("┃"))
    return [c.strip() for c in row.strip().strip("┃").split("┃")]


def _readme_block(after: str) -> str:
    return README.split(after, 1)[1].split("```", 2)[1]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """`rig sim --port 8765 --truth-log truth.jsonl &`, on a free port."""
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    proc = subprocess.Popen([*rig_argv(), "sim", "--port", "0", "--truth-log", str(truth)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"ws://127\.0\.0\.1:(\d+)", line)
    assert m, line
    yield m.group(0), int(m.group(1))
    proc.terminate()
    proc.wait(10)


def test_1_help_says_what_rig_is_and_where_to_start() -> None:
    r = rig("--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "rig demo" in r.stdout


def test_2_demo_prints_the_readme_table(tmp_path: Path) -> None:
    r = rig("demo", "--headless", "--out", str(tmp_path), env={"COLUMNS": "90"})
    assert r.returncode == 0, r.stderr
    example = _readme_block("What `rig demo` prints")
    assert _columns(r.stdout) == _columns(example)
    for rid in ("recipe", "weather", "what"):
        assert re.search(rf"│ {rid} +│ ok ", r.stdout), rid
    legend = " ".join(line for line in example.splitlines() if "late p50/p99/max:" in line)
    assert legend.split(" · ")[0] in r.stdout
    assert "vs the reference system's own truth log (3 responses): reply onset" in r.stdout
    log = tmp_path / "demo.log"
    log.write_text(r.stdout)
    check = subprocess.run([sys.executable, str(REPO / "scripts/ci/check_demo.py"), str(log),
                            str(REPO / "README.md")], capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_3_the_minimal_session(sim: tuple[str, int], tmp_path: Path) -> None:
    url, port = sim
    block = _readme_block("A minimal session against your own system")
    assert "rig run rig/data/turn_what.wav --target ws://127.0.0.1:8765 --headless" in block
    r = rig("run", "rig/data/turn_what.wav", "--target", url, "--headless", cwd=REPO,
            env={"COLUMNS": "80"})  # fmt: skip
    run_dir = None
    try:
        assert r.returncode == 0, r.stderr
        m = re.search(r"run directory: (\S+)", r.stdout)
        assert m, r.stdout
        run_dir = REPO / m.group(1)
        assert _columns(r.stdout)[:3] == ["rollout", "status", "latency ms"]  # laid out for 80
        rep = rig("report", str(run_dir), env={"COLUMNS": "80"})
        assert rep.returncode == 0, rep.stderr
        assert "run " in rep.stdout and ": 1 rollout" in rep.stdout
        assert max(len(line.rstrip()) for line in rep.stdout.splitlines()) <= 80
        assert "…" not in rep.stdout
        html = tmp_path / "report.html"
        assert rig("report", str(run_dir), "--html", str(html)).returncode == 0
        assert html.stat().st_size > 1000
        plot = rig("plot", str(run_dir / "rollouts" / "turn_what"), "-o", str(tmp_path / "t.png"))
        if "pip install" not in plot.stderr:  # the plot extra
            assert plot.returncode == 0 and (tmp_path / "t.png").exists(), plot.stderr
    finally:
        if run_dir is not None and run_dir.is_dir():
            import shutil

            shutil.rmtree(run_dir)


def test_4_the_usual_first_mistakes_get_one_line(sim: tuple[str, int], tmp_path: Path) -> None:
    url, port = sim
    bare = rig("run", "rig/data/turn_what.wav", "--target", f"127.0.0.1:{port}", "--out",
               str(tmp_path), cwd=REPO)  # fmt: skip
    assert bare.returncode == 2
    assert bare.stderr.strip().endswith(f"(did you mean ws://127.0.0.1:{port}?)")
    busy = rig("sim", "--port", str(port), timeout=30)  # the README's sim is still running
    assert busy.returncode == 1 and len(busy.stderr.strip().splitlines()) == 1
    assert "address already in use" in busy.stderr
    wrong = rig("report", str(tmp_path))
    assert wrong.returncode == 2 and "not a run directory" in wrong.stderr
    assert socket  # (the port above is the sim's own)


def test_5_python_like_the_readme(sim: tuple[str, int], tmp_path: Path) -> None:
    import rig as rigpkg

    url, _ = sim
    assert 'rig.run_async("builtin:demo", target="ws://127.0.0.1:8765")' in README
    result = rigpkg.run("builtin:demo", target=url, out=str(tmp_path), headless=True)
    assert set(result.statuses.values()) == {"ok"}, result.statuses
    t = rigpkg.load_run(result.run_dir)
    assert len(t.rollouts) == 3
