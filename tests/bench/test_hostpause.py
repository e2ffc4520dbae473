"""bench/hostpause.py: a host pause is a span in which every CPU's observer was overdue (not
one CPU's own delay), and a run's late-frame clusters are attributed only to the pauses they
overlap. The observers themselves run for real for a second."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import hostpause  # noqa: E402

MS = 1_000_000


def test_a_pause_is_every_cpu_overdue_at_once() -> None:
    cpu0 = [(100 * MS, 140 * MS), (500 * MS, 520 * MS)]
    cpu1 = [(102 * MS, 141 * MS), (700 * MS, 720 * MS)]  # 500-520 was cpu0's alone
    assert hostpause.host_pauses([cpu0, cpu1], 5 * MS) == [(102 * MS, 140 * MS)]
    # a common span shorter than the minimum is not a pause
    assert hostpause.host_pauses([[(0, 10 * MS)], [(8 * MS, 20 * MS)]], 5 * MS) == []
    assert hostpause.host_pauses([], 5 * MS) == []


def test_clusters_are_attributed_only_to_pauses_they_overlap(tmp_path: Path) -> None:
    rows = []
    # 3 streams late together by ~30 ms right at a pause, one frame late 9 ms much later
    for stream in range(3):
        rows.append({"dir": "up", "t_sched_ns": 1000 * MS + stream * MS, "lateness_ns": 30 * MS})
    rows.append({"dir": "up", "t_sched_ns": 5000 * MS, "lateness_ns": 9 * MS})
    rows.append({"dir": "up", "t_sched_ns": 6000 * MS, "lateness_ns": 1 * MS})  # on time
    rows.append({"dir": "down", "t_ns": 1000 * MS, "seq": 0})
    rollout = tmp_path / "rollouts" / "r1"
    rollout.mkdir(parents=True)
    (rollout / "chunks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    late = hostpause.late_frames(tmp_path, 8.0)
    assert sorted(late) == [
        (1000 * MS, 30.0),
        (1001 * MS, 30.0),
        (1002 * MS, 30.0),
        (5000 * MS, 9.0),
    ]
    cls = hostpause.attribute(hostpause.clusters(late), [(1005 * MS, 1030 * MS)])
    assert [(c["frames"], c["host_pause"] is not None) for c in cls] == [(3, True), (1, False)]


@pytest.mark.realtime
def test_observers_wake_on_every_cpu() -> None:
    obs = hostpause.run_observers(1.0, 5.0, 5, [0])
    (cpu,) = obs["cpus"]
    assert cpu["cpu"] == 0
    assert cpu["wakes"] > 200  # ~1 000 on an idle machine; a loaded CI box still wakes
    assert isinstance(obs["host_pauses"], list)
