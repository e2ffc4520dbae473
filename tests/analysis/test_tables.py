"""rig.load_run on a real run directory: DataFrames with pandas, lists of dicts without."""

from __future__ import annotations

from pathlib import Path

import pytest

import rig
from tests.support.demorun import broken_copy, demo_run

pytestmark = pytest.mark.realtime


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_run(tmp_path_factory)


def test_plain_rows_without_pandas(run: Path) -> None:
    t = rig.load_run(run, frames=False)
    assert t.manifest is not None and t.manifest["run_id"] == "demo"
    assert [r["rollout_id"] for r in t.rollouts] == ["recipe", "weather", "what"]
    assert all(r["status"] == "ok" and r["pass"] is True for r in t.rollouts)
    assert len(t.responses) == 3
    resp = t.responses[0]
    for key in ("latency_ms", "uplink_ms", "model_ms", "downlink_ms", "queue_ms",
                "uplink_err_ms", "model_err_ms"):  # fmt: skip
        assert isinstance(resp[key], float), key
    # every chunk of both directions, with its rollout
    up = [c for c in t.chunks if c["rollout_id"] == "what" and c["dir"] == "up"]
    frames = t.rollouts[2]["uplink_frames"]
    assert len(up) == frames and [c["seq"] for c in up] == list(range(frames))
    kinds = {e["kind"] for e in t.events}
    assert {"session.start", "control.turn_start", "control.turn_end"} <= kinds
    # nested values are flat columns: no dicts or lists left in any cell
    for table in (t.rollouts, t.responses, t.chunks, t.events):
        for row in table:
            assert not any(isinstance(v, dict | list) for v in row.values()), row
    assert t.words == []  # no rollout of this run has words.jsonl


def test_dataframes_with_pandas(run: Path, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    t = rig.load_run(broken_copy(run, tmp_path / "b"))
    assert isinstance(t.rollouts, pd.DataFrame) and isinstance(t.responses, pd.DataFrame)
    assert t.rollouts.set_index("rollout_id")["status"].to_dict() == {
        "recipe": "error", "weather": "ok", "what": "ok"
    }  # fmt: skip
    assert len(t.responses) == 2  # the errored rollout has none
    by_item = t.responses.groupby("item")["latency_ms"].median()
    assert set(by_item.index) == {"weather", "what"}
    assert t.chunks.groupby(["rollout_id", "dir"]).size().min() > 10
    assert "t_ns" in t.events.columns


def test_result_object_loads_the_same_tables(run: Path) -> None:
    result = rig.RunResult.from_dir(run)
    assert result.ok and result.statuses == {"recipe": "ok", "weather": "ok", "what": "ok"}
    rows = result.tables().responses
    assert len(rows) == len(result.latencies_ms) == 3
