"""bench/frame_path.py and bench/recv_path.py run on the real objects and say per-piece
costs (tiny sizes: that they work, not what they measure)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import frame_path  # noqa: E402


def test_the_frame_path_serves_every_stream_and_times_each_piece() -> None:
    got = frame_path.measure(frames=30, streams=3)
    parts = ("observe", "next_frame", "send", "sent", "put")
    assert set(got) == {*parts, "total"}
    assert all(got[k] > 0 for k in parts)
    assert abs(got["total"] - sum(got[k] for k in parts)) < 1e-9


def test_the_plain_path_serves_every_stream_without_a_frame_object() -> None:
    got = frame_path.measure(frames=30, streams=3, path="plain")
    parts = ("observe", "plain_pcm", "send", "sent", "put")
    assert set(got) == {*parts, "total"}
    assert all(got[k] > 0 for k in parts)
    assert abs(got["total"] - sum(got[k] for k in parts)) < 1e-9


@pytest.mark.realtime
def test_the_receive_path_bench_reads_every_message_both_ways() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH / "recv_path.py"), "--messages", "40", "--runs", "1"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    # the ready message, every audio message and the close, both ways
    assert out.count("42 messages") == 2, out
    assert "data_received / recv:" in out


@pytest.mark.realtime
def test_the_tree_ab_runs_each_tree_and_prints_the_ratio() -> None:
    root = BENCH.parent
    out = subprocess.run(
        [sys.executable, str(BENCH / "abtrees.py"), "--trees", f"a={root}", f"b={root}",
         "--n", "2", "--seconds", "1", "--rounds", "1"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert out.count("'timing_valid': 2") == 2, out
    assert "b / a per pair (steady): [" in out
