"""Which rig the tests import.

With RIG_TEST_INSTALLED=1 (scripts/test, CI) the tests must exercise the installed package,
never the source tree: a module or package-data file missing from the wheel has to fail
here, as it would for a user. So the repo root stays off sys.path (for this process and,
through PYTHONSAFEPATH, for every `python -m rig` it starts from the repo root), and
`tests.support` comes from a directory that holds only a link to tests/. If rig was
imported from the source tree anyway, the session stops before collecting anything.

Without it (a developer with `pip install -e '.[dev]'`) the repo root is appended to
sys.path, after site-packages, so `tests.support` imports either way.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALLED = os.environ.get("RIG_TEST_INSTALLED") == "1"


def _is_repo_root(entry: str) -> bool:
    try:
        return Path(entry or ".").resolve() == REPO
    except OSError:
        return False


def _tests_only_dir() -> str:
    """A temporary directory whose only entry is a link to tests/ (removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix="rig-tests-path-"))
    (path / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return str(path)


def source_tree_rig(module_file: str | None) -> bool:
    """Whether a `rig.__file__` lies in this checkout's rig/ (not an installed copy)."""
    return module_file is not None and Path(module_file).resolve().is_relative_to(REPO / "rig")


if INSTALLED:
    os.environ["PYTHONSAFEPATH"] = "1"
    sys.path[:] = [p for p in sys.path if not _is_repo_root(p)]
    _link_dir = _tests_only_dir()
    sys.path.insert(0, _link_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_link_dir, os.environ.get("PYTHONPATH", "")) if p
    )
    import rig

    if source_tree_rig(rig.__file__):
        pytest.exit(
            f"RIG_TEST_INSTALLED=1, but rig was imported from the source tree ({rig.__file__}): "
            "install it non-editable (pip install '.[dev]') and run pytest with PYTHONSAFEPATH=1",
            returncode=4,
        )
elif str(REPO) not in sys.path and "" not in sys.path:
    sys.path.append(str(REPO))


# Tests that run in real time share two cores with everything else on a CI box: a rollout the
# rig flags for its own timing, or a scheduling hiccup in a bound, fails one run in many. Each
# test is run again on failure (real-time ones twice, others once); a bug still fails every
# attempt, and pytest's summary counts the reruns ("N rerun"), so flakiness stays visible.
# A test that timed out is never rerun: a hang is a bug, and it would cost another 300 s.
REALTIME_MARKS = ("realtime", "device", "netns", "mqtt", "pipecat")
NO_RERUN_ON = r"Timeout \(>"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    for item in items:
        if item.get_closest_marker("flaky") is None:
            reruns = 2 if any(item.get_closest_marker(m) for m in REALTIME_MARKS) else 1
            item.add_marker(pytest.mark.flaky(reruns=reruns, rerun_except=NO_RERUN_ON))
