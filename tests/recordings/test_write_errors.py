"""A failing disk (issue #15 row 1): every write error is caught per rollout and recorded.

Real faults, no mocks: `/dev/full` (ENOSPC on every write), RLIMIT_FSIZE (EFBIG once a file
outgrows the limit, in a child process) and a tmpfs of 256 KiB in a private mount namespace
(a disk that really fills up). The rollout that could not be written ends `write_error`, the
writer thread lives on, the run goes on for the others (or stops, saying why, when the whole
disk is full) and a resume redoes the failed rollout.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rig.core.records import ChunkRecord
from rig.recordings.writer import RecordingWriter
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

DATA = Path(__file__).resolve().parents[2] / "rig" / "data"


def _chunk(seq: int) -> ChunkRecord:
    return ChunkRecord("up", seq, 320, 16_000, 1_000 + seq, 1_000 + seq, 0)


def test_writer_survives_a_full_disk_on_one_rollout(tmp_path) -> None:
    bad, good = tmp_path / "bad", tmp_path / "good"
    bad.mkdir()
    os.symlink("/dev/full", bad / "chunks.jsonl")  # every write: ENOSPC
    w = RecordingWriter()
    w.start()
    rb, rg = w.rollout(str(bad), 16_000), w.rollout(str(good), 16_000)
    done = threading.Event()
    for seq in range(50):
        rb.chunk(_chunk(seq))
        rg.chunk(_chunk(seq))
        rb.user_audio(np.ones(320, dtype=np.int16))
        rg.user_audio(np.ones(320, dtype=np.int16))
    rb.metrics({"status": "ok"})
    rb.close()
    rg.close()
    w.barrier(done.set)
    assert done.wait(10), "the end-of-rollout barrier never fired"
    assert w._thread.is_alive()
    err = w.rollout_error(str(bad))
    assert err is not None and "No space left on device" in err and "chunks.jsonl" in err
    assert w.rollout_error(str(good)) is None
    assert any("No space left" in e for e in w.errors)
    # the good rollout is complete; the bad one's later files were not half-written as ok
    assert len((good / "chunks.jsonl").read_text().splitlines()) == 50
    assert not (bad / "metrics.json").exists()
    # the writer still works for rollouts opened after the failure
    later = tmp_path / "later"
    rl = w.rollout(str(later), 16_000)
    rl.chunk(_chunk(0))
    rl.close()
    w.close(10)
    assert len((later / "chunks.jsonl").read_text().splitlines()) == 1


def _scenario(tmp_path: Path, items: dict[str, float]) -> Path:
    """A scenario file: one turn per item after a pause of the given seconds."""
    lines = ['[suite]\nname = "wr"\n[defaults]\ndrain_quiet_s = 0.5\ndrain_max_s = 5\n']
    for item_id, pause_s in items.items():
        lines.append(
            f'[[items]]\nid = "{item_id}"\nkind = "free"\nsteps = [\n'
            + (f'  {{ type = "pause", seconds = {pause_s} }},\n' if pause_s else "")
            + f'  {{ type = "turn", file = "{DATA / "turn_weather.wav"}", pad_before_s = 0.2 }},\n'
            + "]\n"
        )
    path = tmp_path / "wr.toml"
    path.write_text("".join(lines))
    return path


def _rig_run(args: list[str], limit_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if limit_bytes is not None:  # CPython ignores SIGXFSZ: writes past it fail with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "rig", "run", *args, "--headless", "--rt-priority", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


@pytest.mark.realtime
def test_file_too_large_marks_the_rollout_and_resume_redoes_it(tmp_path) -> None:
    sim, url = start_sim("--latency-ms", "100", "--endpoint-silence-ms", "300", "--reply-s", "0.5")
    scenario = _scenario(tmp_path, {"long": 5.0, "short": 0.0})
    out = tmp_path / "out"
    common = [str(scenario), "--target", url, "--out", str(out), "--run-id", "w"]
    try:
        # user.wav of `long` grows past 240 KB (7.5 s at 16 kHz); `short` stays under it
        first = _rig_run(common, limit_bytes=240_000)
        run_dir = out / "w"
        long_m = json.loads((run_dir / "rollouts" / "long" / "metrics.json").read_text())
        short_m = json.loads((run_dir / "rollouts" / "short" / "metrics.json").read_text())
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert first.returncode == 3, first.stderr
        assert "Traceback" not in first.stderr
        assert long_m["status"] == "write_error", long_m
        assert "File too large" in long_m["reason"] and ".wav" in long_m["reason"]
        assert short_m["status"] == "ok"
        assert manifest["status"] == "done"
        assert manifest["status_counts"] == {"write_error": 1, "ok": 1}
        assert any("File too large" in e for e in manifest["writer"]["errors"])
        assert "write_error" in first.stdout
        # resume without the limit: only the failed rollout runs again
        second = _rig_run(common)
        assert_run_ok(second.returncode, second.stderr, run_dir)
        assert "short: already done, skipped" in second.stderr
        long_m = json.loads((run_dir / "rollouts" / "long" / "metrics.json").read_text())
        assert long_m["status"] == "ok"
        assert (run_dir / "rollouts" / "long.failed-1").is_dir()
    finally:
        stop_sim(sim)


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs none /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.realtime
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and mount namespaces")
def test_full_disk_stops_the_run_cleanly_saying_why(tmp_path) -> None:
    sim, url = start_sim("--latency-ms", "100", "--endpoint-silence-ms", "300", "--reply-s", "0.5")
    scenario = _scenario(tmp_path, {"a": 0.0, "b": 0.0, "c": 0.0})
    out = tmp_path / "full"
    out.mkdir()
    copy = tmp_path / "copy"
    cmd = " ".join(
        [
            sys.executable,
            "-m",
            "rig",
            "run",
            str(scenario),
            "--target",
            url,
            "--out",
            str(out),
            "--run-id",
            "f",
            "--headless",
            "--rt-priority",
            "0",
        ]
    )
    script = (
        f"mount -t tmpfs -o size=256k none {out} && {{ {cmd}; echo rc=$?; }}; cp -a {out} {copy}"
    )
    try:
        proc = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop_sim(sim)
    assert "rc=3" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "No space left on device" in proc.stderr
    assert "run stopped" in proc.stderr
    started = [line for line in proc.stderr.splitlines() if line.endswith(": start")]
    assert started == ["a: start"], proc.stderr  # b and c never started on a full disk
    assert (copy / "f" / "rollouts" / "a").is_dir()
    assert not (copy / "f" / "rollouts" / "b").exists()


def test_atomic_json_keeps_the_old_file_and_no_temp_on_failure(tmp_path) -> None:
    from rig.recordings.jsonwrite import write_json_atomic

    path = tmp_path / "metrics.json"
    write_json_atomic(str(path), {"status": "ok"})
    with pytest.raises(IsADirectoryError):
        write_json_atomic(str(tmp_path), {"status": "x"})  # the rename fails
    assert json.loads(path.read_text()) == {"status": "ok"}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}.tmp.*"))  # no temp file left
    # a NaN in metrics: still written, the status kept, the value null and named
    write_json_atomic(str(path), {"status": "device_error", "x": {"y": float("nan")}})
    m = json.loads(path.read_text())
    assert m["status"] == "device_error" and m["x"]["y"] is None and "x.y" in m["invalid"]
