"""`rig run --host-watch`: observers of the machine itself, matched to flagged rollouts.

The observers are real processes on every CPU. A pause of the whole machine cannot be made
on demand here, so the tests make the observers' view of one: every observer is stopped
(SIGSTOP) for the same 80 ms, which is what they would record if the host stopped the CPUs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import rig
from rig.analysis.hostpause import (
    attribute,
    budget_stops,
    host_pauses,
    late_clusters,
    verdict_line,
)
from rig.errors import ConfigError
from rig.hostwatch import HostWatch, Observed
from rig.runs.hostreport import host_watch_line, write_host_report
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

MS = 1_000_000
WAV = str(Path(rig.__file__).parent / "data" / "turn_what.wav")


def test_a_host_pause_is_where_every_cpu_was_overdue_at_once() -> None:
    per_cpu = {0: [(10 * MS, 30 * MS), (50 * MS, 52 * MS)], 1: [(20 * MS, 40 * MS), (60, 70)]}
    assert host_pauses(per_cpu) == [(20 * MS, 30 * MS)]
    assert host_pauses({0: [(0, 5), (3, 9)], 1: [(4, 20)]}) == [(4, 9)]  # overlaps merged
    assert host_pauses(per_cpu, min_ns=11 * MS) == []
    assert host_pauses({}) == []


def test_late_frames_cluster_and_meet_the_pauses_they_overlap() -> None:
    period = 20 * MS
    frames = [(k * period, k * period + 200_000) for k in range(200)]  # on time
    frames[50] = (50 * period, 50 * period + 9 * MS)  # a cluster of two, 1 s in
    frames[51] = (51 * period, 51 * period + 4 * MS)
    frames[150] = (150 * period, 150 * period + 6 * MS)  # alone, 3 s in
    clusters = late_clusters(frames, late_ns=2 * MS)
    assert [(c.frames, c.worst_ns) for c in clusters] == [(2, 9 * MS), (1, 6 * MS)]
    pause = (50 * period + 1 * MS, 50 * period + 8 * MS)
    report = attribute(frames, [pause], late_ns=2 * MS)
    assert report["late_clusters"] == 2 and report["in_host_pause"] == 1
    assert report["worst_late_ms_in_pause"] == 9.0 and report["worst_late_ms_outside"] == 6.0
    assert report["host_pauses"] == 1 and report["host_pause_max_ms"] == 7.0
    line = verdict_line("r1", report)
    assert line is not None and "1 of 2 clusters" in line and "worst outside one 6 ms" in line
    # a pause that ended before the frames were due explains nothing
    early = attribute(frames, [(0, 50 * period - 1)], late_ns=2 * MS)
    assert early["in_host_pause"] == 0 and early["host_pauses"] == 1
    assert attribute([], [pause], 2 * MS)["late_clusters"] == 0


def _chunks(d: Path, frames: list[tuple[int, int]]) -> None:
    d.mkdir(parents=True)
    lines = [
        json.dumps({"dir": "up", "seq": k, "t_ns": s, "t_sched_ns": dl})
        for k, (dl, s) in enumerate(frames)
    ]
    (d / "chunks.jsonl").write_text("\n".join(lines) + "\n")


def _frames(t0: int, n: int, late: dict[int, int]) -> list[tuple[int, int]]:
    return [(t0 + k * 20 * MS, t0 + k * 20 * MS + late.get(k, 100_000)) for k in range(n)]


@pytest.mark.realtime
async def test_observers_on_every_cpu_see_the_machine_stop(tmp_path: Path) -> None:
    watch = HostWatch(priority=5, threshold_ms=2.0)
    watch.start()
    await watch.wait_ready()
    procs = list(watch._procs.values())
    assert len(procs) == len(os.sched_getaffinity(0))
    await asyncio.sleep(0.2)
    t0 = time.monotonic_ns()
    for p in procs:  # the observers' view of a host pause: nothing of them runs for 80 ms
        p.send_signal(signal.SIGSTOP)
    await asyncio.sleep(0.08)
    for p in procs:
        p.send_signal(signal.SIGCONT)
    t1 = time.monotonic_ns()
    await asyncio.sleep(0.2)
    observed = await asyncio.to_thread(watch.stop)
    assert observed.errors == []
    assert all(n > 100 for n in observed.wakes.values()), observed.wakes
    pauses = host_pauses(observed.late)
    longest = max(pauses, key=lambda p: p[1] - p[0])
    assert 60 * MS < longest[1] - longest[0] <= t1 - t0 + 5 * MS, pauses
    assert t0 - 2 * MS <= longest[0] and longest[1] <= t1 + 20 * MS

    # a run directory: one flagged rollout late inside the pause, one late outside it, one
    # flagged before the watch began (a resume's), one valid
    run = tmp_path / "run"
    start = longest[0] - 100 * MS  # 15 frames: inside the watch
    inside = (longest[0] - start) // (20 * MS)
    rollouts = {
        "hit": (_frames(start, 15, {inside: 30 * MS, inside + 1: 12 * MS}), False),
        "own": (_frames(start, 15, {1: 7 * MS}), False),
        "old": (_frames(observed.start_ns - 10**9, 20, {3: 9 * MS}), False),
        "fine": (_frames(start, 15, {inside: 30 * MS}), True),
    }
    for rid, (frames, valid) in rollouts.items():
        _chunks(run / "rollouts" / rid, frames)
        (run / "rollouts" / rid / "metrics.json").write_text(json.dumps({"timing_valid": valid}))
    got = write_host_report(str(run), observed)
    assert sorted(got) == ["hit", "own"]
    assert got["hit"]["in_host_pause"] == 1 and got["hit"]["late_clusters"] == 1
    assert got["own"]["in_host_pause"] == 0 and got["own"]["worst_late_ms_outside"] == 7.0
    # a second watch (a resume) adds itself; the file is whole JSON every time
    write_host_report(str(run), observed)
    saved = json.loads((run / "host_pauses.json").read_text())
    assert len(saved["watches"]) == 2
    assert saved["watches"][0]["watch"]["rt"].startswith(("SCHED_FIFO 5", "default"))
    first = saved["watches"][0]  # every pause is the host's or the real-time budget's
    assert first["host_pauses"] + len(first["budget_stops"]) == len(pauses)


@pytest.mark.realtime
def test_rig_run_with_a_host_watch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rig.cli import main

    proc, url = start_sim("--latency-ms", "200", "--endpoint-silence-ms", "300", "--reply-s", "0.4")
    try:
        code = main(["run", WAV, "--target", url, "--out", str(tmp_path), "--run-id", "hw",
                     "--headless", "--max-s", "20", "--host-watch"])  # fmt: skip
    finally:
        stop_sim(proc)
    err = capsys.readouterr().err
    assert_run_ok(code, None, tmp_path / "hw")
    assert f"host watch ({len(os.sched_getaffinity(0))} CPUs" in err, err
    saved: dict[str, Any] = json.loads((tmp_path / "hw" / "host_pauses.json").read_text())
    (entry,) = saved["watches"]
    assert entry["watch"]["cpus"] == sorted(os.sched_getaffinity(0))
    assert all(int(n) > 500 for n in entry["watch"]["wakes"].values())  # ~1 000 a second
    manifest = json.loads((tmp_path / "hw" / "manifest.json").read_text())
    assert manifest["config"]["host_watch"] is True
    line = host_watch_line(
        {**_summary(), "host_pauses": 2}, {"a": {"late_clusters": 3, "in_host_pause": 2}}
    )
    assert "2 of 3 clusters of late frames in 1 flagged" in line


def _summary() -> dict[str, Any]:
    return {"cpus": 2, "rt": "SCHED_FIFO 5", "seconds": 1.0, "host_pauses": 0,
            "host_pause_max_ms": 0.0, "threshold_ms": 2.0, "errors": []}  # fmt: skip


async def test_the_watch_is_of_this_machine_only() -> None:
    with pytest.raises(ConfigError, match="--host-watch watches this machine"):
        await rig.run_async(
            "builtin:demo", target="ws://127.0.0.1:9", host_watch=True, engine="ray"
        )


S = 1_000_000_000


def test_stops_ending_at_one_phase_of_the_budget_period_are_the_budgets() -> None:
    """Traced 2026-12-07: the "pauses" of a 200-at-once run ended within 40 µs of one phase
    of each second, as the kernel's real-time budget ends its stops; a host resumes at any
    phase. Neighbours are found across the period's wrap too."""
    phase = 88_485_000
    ends = [S + phase, 2 * S + phase + 20_000, 3 * S + phase - 30_000, 5 * S + 342_657_000]
    pauses = [(e - 30 * MS, e) for e in ends]
    assert budget_stops(pauses, S) == [True, True, True, False]
    assert budget_stops(pauses[:1], S) == [False]  # one stop: nothing to line up with
    assert budget_stops(pauses, 0) == [False] * 4
    wrap = [(0, S - 200_000), (2 * S, 2 * S + 100_000), (3 * S, 3 * S + 400 * MS)]
    assert budget_stops(wrap, S) == [True, True, False]  # 0.3 ms apart across the wrap
    assert budget_stops(wrap, S, tol_ns=100_000) == [False, False, False]


@pytest.mark.parametrize("throttles", [True, False])
def test_the_report_counts_the_budgets_stops_apart_from_the_hosts(
    monkeypatch: pytest.MonkeyPatch, throttles: bool
) -> None:
    import rig.runs.hostreport as hostreport

    budget = {"runtime_us": 950_000, "period_us": 1_000_000, "throttles": throttles}
    monkeypatch.setattr(hostreport, "rt_budget", lambda: budget)
    # both CPUs' observers late together: three stops ending at one phase, one elsewhere
    spans = [(k * S + 50 * MS, k * S + 88 * MS) for k in (1, 2, 3)] + [(4 * S, 4 * S + 9 * MS)]
    observed = Observed(
        cpus=[0, 1], late={0: spans, 1: spans}, wakes={0: 5000, 1: 5000}, rt="SCHED_FIFO 5",
        threshold_ms=2.0, start_ns=0, end_ns=5 * S,
    )  # fmt: skip
    host, stops = hostreport.split_pauses(observed, budget)
    assert (host, stops) == ((spans[3:], spans[:3]) if throttles else (spans, []))
    summary = hostreport.host_summary(observed)
    assert summary["host_pauses"] == len(host) and summary["budget_stops"] == len(stops)
    line = host_watch_line(summary, None)
    assert ("3 stops that ended at one instant of each second" in line) == throttles
    assert f"{len(host)} pauses of the whole machine" in line
