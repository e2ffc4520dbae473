"""bench/stops.py: late uplink frames pooled over a run's rollouts and grouped in time; a
stop that hits most streams at once is the loop's, and their spacing is reported."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import stops  # noqa: E402

MS = 1_000_000


def write_run(tmp_path: Path, rows_by_rollout: dict[str, list[dict[str, object]]]) -> Path:
    for name, rows in rows_by_rollout.items():
        d = tmp_path / "rollouts" / name
        d.mkdir(parents=True)
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (d / "chunks.jsonl").write_text(text + '{"dir": "up", "t_sched')  # a torn last line
    return tmp_path


def up(t_ms: float, late_ms: float) -> dict[str, object]:
    return {"dir": "up", "t_sched_ns": int(t_ms * MS), "lateness_ns": int(late_ms * MS)}


def test_stops_once_a_second_across_streams_and_a_lone_late_frame(tmp_path: Path) -> None:
    rows: dict[str, list[dict[str, object]]] = {f"r{i}": [] for i in range(4)}
    for k in range(3):  # every stream late together at 1 s, 2 s, 3 s (+ its phase)
        for i in range(4):
            rows[f"r{i}"] += [up(1000 * (k + 1) + i, 30), up(1000 * (k + 1) + 20 + i, 12)]
    rows["r0"] += [up(3500, 9), up(3600, 2), {"dir": "down", "t_ns": 3500 * MS, "seq": 1}]
    run = write_run(tmp_path, rows)

    late, spans = stops.late_frames(run, 8.0)
    assert len(late) == 3 * 4 * 2 + 1  # the on-time and down chunks are not late
    assert spans["r0"] == (1000 * MS, 3600 * MS) and spans["r3"] == (1003 * MS, 3023 * MS)
    found = stops.stops(late, spans)
    # at 3.5 s only r0 still streams: one stream of one
    assert [(s["first_ns"] // MS, s["streams"], s["active"], s["frames"]) for s in found] == [
        (1000, 4, 4, 8), (2000, 4, 4, 8), (3000, 4, 4, 8), (3500, 1, 1, 1)
    ]  # fmt: skip
    assert found[0]["max_ms"] == 30.0 and found[0]["last_ns"] == 1023 * MS
    got = stops.summary(found[:3])
    assert got["stops"] == 3 and got["wide_stops"] == 3 and got["wide_worst_ms"] == 30.0
    assert got["wide_spacing_s"] == [1.0, 1.0] and got["wide_spacing_median_s"] == 1.0


def test_frames_further_apart_than_the_gap_are_separate_stops() -> None:
    late = [(0, 10.0, "a"), (29 * MS, 10.0, "b"), (60 * MS, 10.0, "a")]
    spans = {"a": (0, 100 * MS), "b": (0, 100 * MS), "c": (0, 100 * MS), "d": (0, 100 * MS)}
    found = stops.stops(late, spans, gap_ms=30)
    assert [(s["frames"], s["streams"], s["active"]) for s in found] == [(2, 2, 4), (1, 1, 4)]
    assert stops.summary(found)["wide_stops"] == 1  # 2 of 4 is half: wide; 1 of 4 is not
    assert [s["frames"] for s in stops.stops(late, spans, gap_ms=40)] == [3]
    assert stops.summary([]) == {
        "stops": 0, "wide_stops": 0, "wide_worst_ms": 0.0, "wide_spacing_s": [],
        "wide_spacing_median_s": None,
    }  # fmt: skip


def test_the_command_prints_each_stop_and_says_when_there_is_no_run(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {"a": [up(100, 20)], "b": [up(101, 25), up(400, 1)]})
    out = tmp_path / "s.json"
    r = subprocess.run(
        [sys.executable, str(BENCH / "stops.py"), str(run), "--json", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "streams 2/2" in r.stdout and "worst   25.0 ms" in r.stdout
    assert json.loads(out.read_text())["summary"]["wide_stops"] == 1
    r = subprocess.run(
        [sys.executable, str(BENCH / "stops.py"), str(tmp_path / "none")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "no uplink frames in rollouts/*/chunks.jsonl" in r.stderr
