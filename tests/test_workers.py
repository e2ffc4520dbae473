"""`rig run --workers N`: rollouts sharded over worker processes into one run directory, one
merged manifest, workers that die with the parent, resume across workers; and the pieces."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rig.errors import ConfigError
from rig.runs import workers
from rig.runs.config import RunConfig
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import wait_for

ITEMS = (
    "pause", "turn_taking", "backchannel", "interruption", "user_backchannel", "whisper", "noisy",
)  # fmt: skip


def test_shards_cover_every_rollout_once_and_shares_add_up() -> None:
    items = [f"r{i}" for i in range(11)]
    parts = [workers.shard(items, k, 3) for k in range(3)]
    assert sorted(sum(parts, [])) == sorted(items) and parts[0][:2] == ["r0", "r3"]
    assert [workers.share(10, k, 3) for k in range(3)] == [4, 3, 3]
    assert sum(workers.share(50, k, 4) for k in range(4)) == 50
    assert workers.share(1, 1, 2) == 1  # a worker never gets 0 (it would never start one)


def test_merge_sums_the_workers_and_names_a_missing_one(tmp_path: Path) -> None:
    for k, (rid, status) in enumerate([("a", "ok"), ("b", "transport_error")]):
        m = {"run_id": "x", "status": "done", "config": {"concurrency": 1, "scenario": "s"},
             "rollouts": {rid: {}}, "status_counts": {status: 1}, "targets": [{"url": "u"}],
             "timing_invalid": [rid] if k else [], "scheduling": {"policy": f"p{k}"}}  # fmt: skip
        (tmp_path / workers.worker_manifest_name(k)).write_text(json.dumps(m))
    merged = workers.merge(str(tmp_path), 2, {"concurrency": 8}, [11, 12])
    assert merged["status"] == "done" and set(merged["rollouts"]) == {"a", "b"}
    assert merged["status_counts"] == {"ok": 1, "transport_error": 1}
    assert merged["timing_invalid"] == ["b"] and merged["targets"] == [{"url": "u"}]
    assert merged["config"] == {"concurrency": 8, "scenario": "s"}
    assert merged["workers"]["pids"] == [11, 12]
    assert [s["policy"] for s in merged["workers"]["scheduling"]] == ["p0", "p1"]
    three = workers.merge(str(tmp_path), 3, {})
    assert three["status"] == "interrupted" and three["workers"]["missing"] == [2]


def run_cmd(url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rig", "run", "builtin:timing", "--target", url,
            "--out", str(out), "--run-id", "w", "--headless", "--concurrency", "10",
            "--repeat", "2", "--workers", "2", *extra]  # fmt: skip


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.realtime
def test_two_workers_share_one_run_die_with_the_parent_and_resume(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "1", "--latency-ms", "300")
    ids = {f"{item}-r{k}" for item in ITEMS for k in range(2)}
    try:
        proc = subprocess.Popen(run_cmd(url, tmp_path), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        rollouts = tmp_path / "w" / "rollouts"

        def two_workers() -> list[int]:
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
            pids = [int(x) for x in out.stdout.split()]
            return pids if len(pids) == 2 else []

        pids = wait_for(two_workers, timeout_s=30, every_s=0.1, what="two workers")
        wait_for(lambda: len(list(rollouts.glob("*"))) >= 4, timeout_s=60, every_s=0.1,
                 what="rollouts started")  # fmt: skip
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not any(alive(p) for p in pids), timeout_s=10, every_s=0.1,
                 what="workers gone with their parent")  # fmt: skip
        done = {p.parent.name for p in rollouts.glob("*/metrics.json")}
        assert len(done) < len(ids)
        r = subprocess.run(run_cmd(url, tmp_path), capture_output=True, text=True, timeout=180)
    finally:
        stop_sim(sim)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    skipped = set(re.findall(r"^(\S+): already done, skipped$", r.stderr, re.M))
    redone = set(re.findall(r"^(\S+): start$", r.stderr, re.M))
    assert skipped == done and redone == ids - done, r.stderr  # each rollout once, across workers
    run = tmp_path / "w"
    shards = [json.loads((run / workers.worker_manifest_name(k)).read_text()) for k in (0, 1)]
    assert not set(shards[0]["rollouts"]) & set(shards[1]["rollouts"])
    assert set(shards[0]["rollouts"]) | set(shards[1]["rollouts"]) == ids
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["status_counts"] == {"ok": len(ids)}
    assert manifest["resumed_from"]["status"] == "running"  # the killed attempt, on record
    assert manifest["config"]["concurrency"] == 10 and manifest["workers"]["n"] == 2
    assert len(set(manifest["workers"]["pids"])) == 2
    invalid = {rid for rid in ids
               if json.loads((run / "rollouts" / rid / "metrics.json").read_text())[
                   "timing_valid"] is False}  # fmt: skip
    assert set(manifest["timing_invalid"]) == invalid
    assert r.returncode == (3 if invalid else 0)
    assert "run directory:" in r.stdout  # one summary, from the parent


@pytest.mark.realtime
def test_sim_workers_share_one_port_and_die_with_the_parent(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "0.3", "--workers", "2")
    try:
        out = subprocess.run(["pgrep", "-P", str(sim.pid)], capture_output=True, text=True)
        (worker,) = [int(x) for x in out.stdout.split()]
        wav = str(Path(__file__).resolve().parents[1] / "rig" / "data" / "turn_what.wav")
        r = subprocess.run(
            [sys.executable, "-m", "rig", "run", wav, "--target", url, "--out", str(tmp_path),
             "--run-id", "s", "--headless", "--repeat", "12", "--concurrency", "12",
             "--drain-quiet-s", "0.5"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode in (0, 3), r.stderr[-2000:]
        manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
        assert manifest["status_counts"] == {"ok": 12}
    finally:
        stop_sim(sim)
    assert sim.stdout is not None
    text = sim.stdout.read()
    served = [int(n) for n in re.findall(r"rig sim stopped after (\d+) connections", text)]
    assert len(served) == 2 and sum(served) == 12, text  # both processes served
    assert min(served) >= 1, served  # the kernel spread them (12 on one: p = 2**-11)
    wait_for(lambda: not alive(worker), timeout_s=10, every_s=0.1, what="worker stopped")


def test_a_killed_sim_parent_takes_its_workers_along() -> None:
    sim, _ = start_sim("--workers", "2")
    out = subprocess.run(["pgrep", "-P", str(sim.pid)], capture_output=True, text=True)
    (worker,) = [int(x) for x in out.stdout.split()]
    os.kill(sim.pid, signal.SIGKILL)
    sim.wait()
    wait_for(lambda: not alive(worker), timeout_s=10, every_s=0.1, what="worker gone")


def test_sim_workers_refuse_what_they_cannot_shard(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rig", "sim", "--workers", "2", "--truth-log", str(tmp_path / "t")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "--truth-log needs --workers 1" in r.stderr


def test_auto_is_one_process_until_one_loop_is_full_then_one_per_core_at_most() -> None:
    per = workers.PER_LOOP_ROLLOUTS
    assert workers.auto_workers(3, 3, cores=8) == 1  # a small run: no processes to start
    assert workers.auto_workers(per, 10 * per, cores=8) == 1
    assert workers.auto_workers(per + 1, 10 * per, cores=8) == 2
    assert workers.auto_workers(10 * per, 10 * per, cores=2) == 2  # never past the cores
    assert workers.auto_workers(10 * per, per, cores=8) == 1  # at once <= rollouts
    assert workers.auto_workers(None, 3 * per, cores=8) == 3  # concurrency auto: the rollouts
    assert workers.auto_workers(None, per, cores=8) == 1


def parsed(*argv: str) -> argparse.Namespace:
    from rig.cli import build_parser

    return build_parser().parse_args(["run", "x.wav", *argv])


def cfg(*argv: str) -> RunConfig:
    """The RunConfig `rig run x.wav ARGV` builds."""
    from rig.cli.runopts import config_from_args

    return config_from_args(parsed(*argv))


def test_workers_option_auto_by_default_and_where_one_process_must_run() -> None:
    from rig.runs.sharded import resolve_workers

    per = workers.PER_LOOP_ROLLOUTS
    many = str(4 * per)
    cores = workers.usable_cores()
    assert parsed().workers == "auto"
    assert resolve_workers(cfg("--concurrency", many), 4 * per) == min(cores, 4)
    assert resolve_workers(cfg("--concurrency", "3"), 4 * per) == 1
    assert resolve_workers(cfg("--workers", "3"), 2) == 2  # never more than rollouts
    for one in (["--transport", "device"], ["--device-clock", "d"], ["--shard", "0/2"]):
        assert resolve_workers(cfg("--concurrency", many, *one), 4 * per) == 1
        with pytest.raises(ConfigError, match="needs one process"):
            resolve_workers(cfg("--workers", "2", *one), 4 * per)
    with pytest.raises(SystemExit):
        parsed("--workers", "many")


def test_auto_leaves_half_the_cores_to_a_system_under_test_on_this_machine() -> None:
    from rig.runs.sharded import resolve_workers

    for url in ("ws://127.0.0.1:8765/ws", "ws://localhost:1/x", "http://[::1]:8080/offer",
                "ws://127.3.4.5/", "wss://rig.localhost/"):  # fmt: skip
        assert workers.is_local_target(url), url
    for url in (None, "", "ws://10.0.0.2:8765/ws", "wss://api.openai.com/v1/realtime",
                "ws://[fe80::1]/", "not a url"):  # fmt: skip
        assert not workers.is_local_target(url), url
    assert workers.cores_for_rig(2, "ws://127.0.0.1:8765/ws") == 1
    assert workers.cores_for_rig(8, "ws://127.0.0.1:8765/ws") == 4
    assert workers.cores_for_rig(1, "ws://127.0.0.1:8765/ws") == 1
    assert workers.cores_for_rig(2, "ws://10.0.0.2:8765/ws") == 2
    per = workers.PER_LOOP_ROLLOUTS
    many = str(10 * per)
    cores = workers.usable_cores()
    local = cfg("--concurrency", many, "--target", "ws://127.0.0.1:8765/ws")
    remote = cfg("--concurrency", many, "--target", "ws://10.0.0.2:8765/ws")
    assert resolve_workers(local, 10 * per) == max(1, min(10, cores // 2))
    assert resolve_workers(remote, 10 * per) == min(10, cores)
    # an explicit N is the user's: not halved
    assert resolve_workers(cfg("--workers", "2", "--target", "ws://127.0.0.1:1/"), 4 * per) == 2


TMUX = ["tmux", "-L", f"rigworkers{os.getpid()}", "-f", "/dev/null"]  # a private server


def tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False).stdout


@pytest.mark.realtime
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_one_live_view_for_every_worker_and_q_leaves_the_run_going(tmp_path: Path) -> None:
    sim, url = start_sim("--reply-s", "0.5")
    wav = str(Path(__file__).resolve().parents[1] / "rig" / "data" / "turn_what.wav")
    done, out, session = tmp_path / "exit", tmp_path / "out", f"rigworkers{os.getpid()}"
    cmd = (
        f"{sys.executable} -m rig run {wav} --target {url} --repeat 6 --concurrency 2 "
        f"--workers 2 --drain-quiet-s 0.5 --out {out} --run-id wv; echo $? > {done}; sleep 30"
    )
    tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "45", cmd)
    ids = [f"turn_what-r{k}" for k in range(6)]

    def screen() -> str:
        return tmux("capture-pane", "-p", "-S", "-100", "-t", session)

    try:
        # one view, the whole run's size, both workers' rollouts running in it at once
        def view_up() -> str | None:
            s = screen()
            return s if "rig · wv · 0/6 done" in s else None

        first = wait_for(view_up, timeout_s=30, every_s=0.1, what="the view")

        def both_running() -> str | None:
            s = screen()
            rows = [ln for ln in s.splitlines() if " running " in ln]
            shown = {rid for rid in ids if any(rid + " " in ln for ln in rows)}
            return s if len(shown) >= 2 else None

        wait_for(both_running, timeout_s=30, every_s=0.1, what="two rollouts running")
        assert "progress:" not in first and ": start" not in first  # no line under the view
        tmux("send-keys", "-t", session, "q")
        wait_for(lambda: "live view closed; the run goes on" in screen(), timeout_s=15,
                 every_s=0.1, what="the view closed")  # fmt: skip
        wait_for(done.exists, timeout_s=120, every_s=0.2, what="the run to end")
        final = screen()
    finally:
        tmux("kill-server")
        stop_sim(sim)
    assert done.read_text().strip() in ("0", "3"), final
    assert "Traceback" not in final
    # after q: the workers' own lines, passed on by the parent
    assert re.search(r"^turn_what-r\d: ok", final, re.M), final
    manifest = json.loads((out / "wv" / "manifest.json").read_text())
    assert manifest["status_counts"] == {"ok": 6} and manifest["workers"]["n"] == 2


@pytest.mark.realtime
def test_webrtc_rollouts_through_two_workers(tmp_path: Path) -> None:
    pytest.importorskip("aiortc")
    sim = subprocess.Popen(
        [sys.executable, "-m", "rig", "sim", "--transport", "webrtc", "--port", "0",
         "--reply-s", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert sim.stdout is not None
    m = re.search(r"http://\S+", sim.stdout.readline())
    try:
        assert m is not None, "rig sim --transport webrtc did not start"
        wav = str(Path(__file__).resolve().parents[1] / "rig" / "data" / "turn_what.wav")
        r = subprocess.run(
            [sys.executable, "-m", "rig", "run", wav, "--target", m.group(0),
             "--transport", "webrtc", "--out", str(tmp_path), "--run-id", "rtc", "--headless",
             "--repeat", "4", "--concurrency", "4", "--workers", "2", "--drain-quiet-s", "0.8"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        stop_sim(sim)
    run = tmp_path / "rtc"
    assert_run_ok(r.returncode, r.stderr, run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status_counts"] == {"ok": 4}, r.stderr[-3000:]
    shards = [json.loads((run / workers.worker_manifest_name(k)).read_text()) for k in (0, 1)]
    assert [len(s["rollouts"]) for s in shards] == [2, 2]
    for k in range(4):
        m_ = json.loads((run / "rollouts" / f"turn_what-r{k}" / "metrics.json").read_text())
        assert m_["status"] == "ok" and m_["transport"]["kind"] == "webrtc", m_.get("transport")


CHILD = """
import asyncio, sys, time
from rig.runs.workers import wait_for_start
time.sleep(float(sys.argv[2]))
print(time.monotonic_ns(), flush=True)  # ready
asyncio.run(wait_for_start(int(sys.argv[1])))
print(time.monotonic_ns(), flush=True)  # go
"""


def test_start_barrier_holds_every_worker_until_the_slowest_is_ready() -> None:
    barrier = workers.StartBarrier(3)
    delays = ["0", "0.8", "x"]  # the third dies before it is ready: EOF, never a hang
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(barrier.child_fd(k)), d],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            pass_fds=(barrier.child_fd(k),),
        )  # fmt: skip
        for k, d in enumerate(delays)
    ]
    barrier.spawned()
    assert barrier.release(timeout_s=30) == 2
    outs = [p.communicate(timeout=30)[0].split() for p in procs]
    barrier.close()
    (ready0, go0), (ready1, go1) = [[int(x) for x in o] for o in outs[:2]]
    assert go0 >= ready1 and go1 >= ready1  # nobody went before the slow one was ready
    assert go0 - ready0 >= 0.5e9  # the fast one waited
    assert procs[2].returncode != 0 and outs[2] == []
