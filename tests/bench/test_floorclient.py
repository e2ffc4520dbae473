"""bench/floorclient.py, the floor anchor of bench/capacity.py: each variant, 4 streams for 2 s
over real sockets on loopback against the floor server in its own process, must move frames
both ways, stamp and record every one, and give a positive CPU per frame."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import floorclient  # noqa: E402

pytestmark = pytest.mark.realtime

STREAMS = 4
SECONDS = 2.0
FRAMES = 100  # 2 s of 20 ms frames per stream
FRAME_BYTES = 640


@pytest.mark.parametrize("variant", ["task", "tick", "tick-uvloop"])
def test_variant_records_both_ways(variant: str, tmp_path: Path) -> None:
    if variant == "tick-uvloop" and not floorclient.have_uvloop():
        pytest.skip("uvloop is not installed")
    row = floorclient.measure(STREAMS, SECONDS, variant, out_dir=str(tmp_path))

    assert row["frames_up"] == STREAMS * FRAMES
    # the server sends from the first handshake on, 0.5 s before t0: more than the window
    assert row["frames_down"] >= STREAMS * FRAMES * 0.9
    assert row["us_per_frame"] > 0
    assert row["p50_ms"] is not None and row["p99_ms"] >= row["p50_ms"]
    assert row["max_ms"] >= row["p99_ms"]
    assert row["down_p99_ms"] is not None

    lines = [json.loads(x) for x in (tmp_path / "frames.jsonl").read_text().splitlines()]
    up = [x for x in lines if x["dir"] == "up"]
    down = [x for x in lines if x["dir"] == "down"]
    assert len(up) == row["frames_up"] and len(down) == row["frames_down"]
    for x in up:
        assert x["lateness_ns"] == x["t_ns"] - x["deadline_ns"]
        assert x["lateness_ns"] >= 0, "a frame went out before its deadline"
    for k in range(STREAMS):
        seqs = [x["seq"] for x in up if x["stream"] == k]
        assert seqs == list(range(FRAMES))
        # absolute deadlines: exactly 20 ms apart, whatever each send's lateness was
        dues = [x["deadline_ns"] for x in up if x["stream"] == k]
        assert {b - a for a, b in zip(dues, dues[1:], strict=False)} == {20_000_000}
        assert (tmp_path / f"up-{k}.pcm").stat().st_size == FRAMES * FRAME_BYTES
        n_down = sum(1 for x in down if x["stream"] == k)
        assert (tmp_path / f"down-{k}.pcm").stat().st_size == n_down * FRAME_BYTES
    # downlink frames carry the server's deadline: arrival after it, and not by seconds
    assert all(0 <= x["lateness_ns"] < 1_000_000_000 for x in down)
    # phases spread over the period: 4 streams in 4 different 1 ms slots
    assert len({x["deadline_ns"] % 20_000_000 for x in up if x["seq"] == 0}) == STREAMS


def test_cli_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "floor.json"
    r = subprocess.run(
        [sys.executable, str(BENCH / "floorclient.py"), "--streams", "2", "--seconds", "1",
         "--runs", "2", "--variant", "best", "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())
    assert [x["variant"] for x in rows] == [floorclient.best_variant()] * 2
    assert f"| 2 | {floorclient.best_variant()} | 2 |" in r.stdout
