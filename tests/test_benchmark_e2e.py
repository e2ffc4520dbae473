"""Benchmarks end to end: the example corpus's points table imported into a suite (slices of a
two-channel conversation file, one channel each, marks, tags, per-item endpointer settings),
run against `rig sim` in its own process over a real WebSocket; every mark must be in
events.jsonl within one sample of where that sample was sent, on that very sample of the
source file; the system must have been told each item's endpointer setting; the report
groups and bootstraps by conversation; a drain waits for a silent system and flags a reply
it cut as censored."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.recordings.wav import read_wav
from rig.sim.truth import read_truth
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "corpus"
RATE = 16_000
SAMPLE_NS = 1e9 / RATE


def rig(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", *args], capture_output=True, text=True, timeout=timeout
    )


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.realtime
def test_imported_corpus_runs_against_sim_with_marks_tags_and_settings(tmp_path: Path) -> None:
    suite = tmp_path / "suite.toml"
    r = rig("import", str(CORPUS / "points.csv"), "-o", str(suite))
    assert r.returncode == 0, r.stderr
    truth_path = tmp_path / "truth.jsonl"
    sim, url = start_sim("--truth-log", str(truth_path), "--latency-ms", "200")
    try:
        r = rig(
            "run",
            str(suite),
            "--target",
            url,
            "--dialect",
            "rig",
            "--concurrency",
            "4",
            "--out",
            str(tmp_path / "out"),
            "--run-id",
            "run",
            "--headless",
        )
    finally:
        stop_sim(sim)
    run = tmp_path / "out" / "run"
    assert_run_ok(r.returncode, r.stderr, run)
    # each item's endpointer setting reached the system (rig-pcm hello, honoured by rig sim)
    hellos = [t["hello"] for t in read_truth(str(truth_path)) if t["event"] == "conn_open"]
    assert sorted(h.get("endpoint_silence_ms") for h in hellos) == [300, 300, 500, 500]
    points = _lines(CORPUS / "points.jsonl")
    manifest = json.loads((run / "manifest.json").read_text())
    for p in points:
        d = run / "rollouts" / p["id"]
        m = json.loads((d / "metrics.json").read_text())
        assert m["status"] == "ok" and m["tags"] == p["tags"]
        assert m["dialect_options"] == p["options"] and m["censored"] is False
        assert manifest["rollouts"][p["id"]]["meta"]["tags"] == p["tags"]
        ups = {c["seq"]: c for c in _lines(d / "chunks.jsonl") if c["dir"] == "up"}
        marks = [e for e in _lines(d / "events.jsonl") if e["kind"] == "mark"]
        assert [e["mark"] for e in marks] == [
            x["kind"] for x in sorted(p["marks"], key=lambda x: x.get("t_s", x.get("start_s")))
        ]
        user, _ = read_wav(str(d / "user.wav"))
        src, _ = sf.read(CORPUS / p["audio"], dtype="int16")
        first = round(p["start_s"] * RATE)
        wanted = sorted(p["marks"], key=lambda x: x.get("t_s", x.get("start_s")))
        for e, want, x in zip(marks, wanted, m["marks"], strict=True):
            c = ups[e["frame_seq"]]
            offset = e["sample"] - e["frame_seq"] * c["n_samples"]
            # the shared-clock time that sample left the rig, within one sample
            assert abs(e["t_ns"] - (c["t_ns"] + offset * SAMPLE_NS)) <= SAMPLE_NS
            off = round(want.get("t_s", want.get("start_s")) * RATE)
            inside = min(160, round(p["end_s"] * RATE) - first - off)
            if inside > 0:  # that sample of user.wav is the marked sample of channel 0
                got = user[e["sample"] : e["sample"] + inside]
                assert np.array_equal(got, src[first + off : first + off + inside, 0])
            assert x["t_s"] == pytest.approx((e["t_ns"] - m["t0_ns"]) / 1e9, abs=1e-9)
            assert x["mark"] == e["mark"] == want["kind"] and x["label"] == e["label"]
        if "reference_text" in p:
            assert m["reference"]["text"] == p["reference_text"]
            assert m["reference"]["words"] == len(p["reference_text"].split())
    # grouped and bootstrapped by conversation
    r = rig("report", str(run), "--by", "conversation", "--cluster", "conversation", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["cluster"] == "conversation" and rep["by"] == ["conversation"]
    assert [g["tags"] for g in rep["groups"]] == [{"conversation": "c1"}, {"conversation": "c2"}]
    assert all(g["n_rollouts"] == 2 for g in rep["groups"])
    text = rig("report", str(run), "--by", "type", "--by", "conversation", "--no-rollouts")
    assert text.returncode == 0, text.stderr
    assert "type=pause conversation=c1" in text.stdout and "CI over conversation" not in text.stdout
    csv_dir = tmp_path / "csv"
    assert rig("report", str(run), "--csv", str(csv_dir)).returncode == 0
    head = (csv_dir / "rollouts.csv").read_text().splitlines()[0].split(",")
    assert {"tag.conversation", "tag.speaker", "censored"} <= set(head)


def _drain_suite(tmp_path: Path, drain: str) -> Path:
    p = tmp_path / "d.toml"
    p.write_text(
        f"[[items]]\nid = 'd'\nsteps = [{{type = 'turn', file = '{CORPUS / 'c1.flac'}', "
        f"channel = 0, start_s = 7.1878, end_s = 9.4096, pad_before_s = 0.2}}, {drain}]\n"
    )
    return p


@pytest.mark.realtime
def test_wait_first_waits_for_a_silent_system_and_a_cut_reply_is_censored(tmp_path) -> None:
    sim, url = start_sim("--policy", "never")
    try:
        drain = "{type = 'drain', quiet_s = 0.5, wait_first_s = 1.5, max_s = 6}"
        r = rig(
            "run",
            str(_drain_suite(tmp_path, drain)),
            "--target",
            url,
            "--out",
            str(tmp_path / "o1"),
            "--run-id",
            "run",
            "--headless",
        )
    finally:
        stop_sim(sim)
    d = tmp_path / "o1" / "run" / "rollouts" / "d"
    events = _lines(d / "events.jsonl")
    turn_end = next(e for e in events if e["kind"] == "turn.end")
    end = next(e for e in events if e["kind"] == "drain.end")
    assert end["spoke"] is False and not end.get("timed_out")
    assert (end["t_ns"] - turn_end["t_ns"]) / 1e9 == pytest.approx(2.0, abs=0.1), r.stderr
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "no_audio" and m["censored"] is False
    sim, url = start_sim("--reply-s", "6", "--latency-ms", "200")
    try:
        drain = "{type = 'drain', quiet_s = 0.5, wait_first_s = 1.5, max_s = 2}"
        r = rig(
            "run",
            str(_drain_suite(tmp_path, drain)),
            "--target",
            url,
            "--out",
            str(tmp_path / "o2"),
            "--run-id",
            "run",
            "--headless",
        )
    finally:
        stop_sim(sim)
    assert_run_ok(r.returncode, r.stderr, tmp_path / "o2" / "run")
    m = json.loads((tmp_path / "o2" / "run" / "rollouts" / "d" / "metrics.json").read_text())
    assert m["censored"] is True
    r = rig("report", str(tmp_path / "o2" / "run"), "--no-rollouts")
    assert "1 rollout(s) censored" in r.stdout, r.stdout
    import rig as riglib

    tables = riglib.load_run(tmp_path / "o2" / "run", frames=False)
    assert tables.rollouts[0]["censored"] is True


@pytest.mark.realtime
def test_a_two_channel_prefill_sends_the_own_track_in_lockstep(tmp_path) -> None:
    p = tmp_path / "two.toml"
    p.write_text(
        f"[[items]]\nid = 'h'\nprefill = '{CORPUS / 'c1.flac'}'\nprefill_channels = ['user', "
        "'own']\nprefill_start_s = 5.0\nprefill_end_s = 7.0\nprefill_speed = 4\n"
        f"steps = [{{type = 'turn', file = '{CORPUS / 'c1.flac'}', channel = 0, start_s = 7.1878,"
        " end_s = 9.4096}, {type = 'drain', quiet_s = 0.5}]\n"
    )
    truth_path = tmp_path / "truth.jsonl"
    sim, url = start_sim("--truth-log", str(truth_path), "--latency-ms", "200")
    try:
        r = rig(
            "run",
            str(p),
            "--target",
            url,
            "--out",
            str(tmp_path / "o"),
            "--run-id",
            "run",
            "--headless",
        )
    finally:
        stop_sim(sim)
    assert_run_ok(r.returncode, r.stderr, tmp_path / "o" / "run")
    truth = read_truth(str(truth_path))
    own = [t for t in truth if t["event"] == "own_audio"]
    # 2 s of the system's own side (channel 1), in the frames that carried the user's side
    assert sum(t["n_samples"] for t in own) == 2 * RATE
    assert [t["start_sample"] for t in own] == [k * 320 for k in range(len(own))]
    recv = [t for t in truth if t["event"] == "recv_chunk"]
    assert [t["seq"] for t in own] == [t["seq"] for t in recv[: len(own)]]
    r = rig("run", str(p), "--target", url, "--dialect", "openai", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "cannot take the system's own past track" in r.stderr
    assert not (tmp_path / "x").exists()
