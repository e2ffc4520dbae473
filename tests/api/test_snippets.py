"""The Python snippets of README.md and docs/api.md, run as a user would: a script with no
`if __name__ == "__main__":` guard, the same from standard input (`python - <<EOF`), and a
Jupyter kernel (nbclient over ipykernel). Each must give one run directory with the timing
analysis in every rollout (issue #26: a `spawn` analysis worker re-ran a guard-less script's
experiment and could not start from stdin; the rollouts still said `ok`).

The only change to a snippet is its target URL (the `rig sim` this test starts), and in a
script the README's `await rig.run_async(...)` is its own `# or rig.run(...)`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.simproc import start_sim, stop_sim

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parents[2]
DOC_URL = "ws://127.0.0.1:8765"
FLAGGED = "flagged for the rig's own timing"


def _block(doc: str, must: str) -> str:
    """The first ```python block of `doc` that contains `must`."""
    text = (ROOT / doc).read_text()
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if must in block:
            return str(block)
    raise AssertionError(f"{doc}: no python block with {must!r}")


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    proc, url = start_sim("--latency-ms", "200", "--endpoint-silence-ms", "300", "--reply-s", "0.5")
    try:
        yield url
    finally:
        stop_sim(proc)


def _check_one_run(cwd: Path, ok: bool, output: str) -> None:
    """One run directory under cwd/recordings, 3 rollouts, each ok with its analysis.
    A snippet that failed may only have failed on the rig's own timing (a loaded box)."""
    runs = [p for p in (cwd / "recordings").iterdir() if p.is_dir()]
    assert len(runs) == 1, (runs, output[-3000:])
    metrics = [json.loads(p.read_text()) for p in runs[0].glob("rollouts/*/metrics.json")]
    assert len(metrics) == 3, output[-3000:]
    for m in metrics:
        assert m["status"] == "ok", (m["status"], m.get("reason"))
        assert isinstance(m.get("timing"), dict) and "error" not in m["timing"], m.get("timing")
        assert m["pass"] is True, m["timing"].get("rule")
        assert m["clock_fit"] is not None
    if not ok:
        assert FLAGGED in output, output[-3000:]
        assert any(m.get("timing_valid") is False for m in metrics)


def _python(cwd: Path, *, script: str | None = None, stdin: str | None = None) -> tuple[bool, str]:
    argv = [sys.executable, script] if script else [sys.executable, "-"]
    proc = subprocess.run(
        argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=240, check=False
    )
    return proc.returncode == 0, proc.stdout + proc.stderr


def test_docs_api_snippet_as_a_script_without_a_main_guard(sim_url: str, tmp_path: Path) -> None:
    code = _block("docs/api.md", "rig.run(").replace(DOC_URL, sim_url)
    assert "__main__" not in code
    (tmp_path / "experiment.py").write_text(code)
    ok, out = _python(tmp_path, script="experiment.py")
    assert ok, out[-3000:]
    assert out.count("True") + out.count("False") >= 3  # it printed its rollouts, once
    _check_one_run(tmp_path, "True recordings" in out or FLAGGED not in out, out)


def test_readme_snippet_from_standard_input(sim_url: str, tmp_path: Path) -> None:
    code = _block("README.md", "rig.run_async(").replace(DOC_URL, sim_url)
    assert "result = await rig.run_async(" in code and "# or rig.run(...)" in code
    code = code.replace("await rig.run_async(", "rig.run(")
    ok, out = _python(tmp_path, stdin=code)
    _check_one_run(tmp_path, ok, out)
    assert "FileNotFoundError" not in out and "BrokenProcessPool" not in out


def test_readme_snippet_in_a_jupyter_kernel(sim_url: str, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = _block("README.md", "rig.run_async(").replace(DOC_URL, sim_url)  # `await` as is
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
        ok, out = True, ""
    except nbclient.exceptions.CellExecutionError as exc:
        ok, out = False, str(exc)
    _check_one_run(tmp_path, ok, out)
