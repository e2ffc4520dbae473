"""`rig run --workers 2 --mqtt`: one MQTT stream from every worker, published by the parent
(the workers' telemetry reaches it over the fleet link), read by a subscriber during the run
and by `rig watch` after it; with `--concurrency auto` each worker runs its own gate."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from pathlib import Path

import pytest

from rig.telemetry import EventBus
from rig.telemetry.mqtt import MqttSubscriber, parse_mqtt_url
from tests.support.broker import Broker, needs_broker
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim

pytestmark = [pytest.mark.mqtt, pytest.mark.realtime]
WAV = str(Path(__file__).resolve().parents[2] / "rig" / "data" / "turn_what.wav")
IDS = {f"turn_what-r{k}" for k in range(4)}


@needs_broker
async def test_two_workers_one_mqtt_stream_one_progress_and_a_gate_each(
    broker: Broker, tmp_path: Path
) -> None:
    sim, url = start_sim("--reply-s", "0.5", "--latency-ms", "200")
    bus = EventBus()
    seen = bus.subscribe(maxlen=100_000)
    subscriber = MqttSubscriber(bus, parse_mqtt_url(broker.url, env={}), run_id="mw")
    sub_task = asyncio.create_task(subscriber.run())
    try:
        await asyncio.wait_for(subscriber.connected.wait(), 10)
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rig", "run", WAV, "--repeat", "4", "--target", url,
            "--out", str(tmp_path), "--run-id", "mw", "--headless", "--workers", "2",
            "--concurrency", "auto", "--mqtt", broker.url, "--progress-interval-s", "1",
            "--drain-quiet-s", "0.5",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err_b = await asyncio.wait_for(run.communicate(), 120)
        await asyncio.sleep(0.5)  # the last messages through the broker
        watch = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rig", "watch", "--mqtt", broker.url, "--run", "mw",
            "--headless", "--exit-when-done", "--duration", "30",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        w_out, w_err = await asyncio.wait_for(watch.communicate(), 40)
    finally:
        sub_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sub_task
        stop_sim(sim)
    err = err_b.decode()
    run_dir = tmp_path / "mw"
    assert_run_ok(run.returncode, err, run_dir)
    events = seen.drain()
    # one stream: one run message, from the parent, with the whole run's size
    runs = [e for e in events if e.kind == "run"]
    assert runs and {e.data["total"] for e in runs} == {4}, [e.data for e in runs]
    done = {e.rollout_id for e in events if e.kind == "status" and e.data.get("state") == "done"}
    assert done == IDS  # every worker's rollouts
    batches = {e.rollout_id for e in events if e.kind == "chunk_batch"}
    assert batches == IDS  # their audio too, not only their ends
    shards = [json.loads((run_dir / f"manifest.worker-{k}.json").read_text()) for k in (0, 1)]
    assert all(s["rollouts"] for s in shards)  # both workers ran some
    # rig watch in another process, after the run: the retained state of all of them
    assert watch.returncode == 0, w_err.decode()[-2000:]
    for rid in IDS:
        assert rid in w_out.decode(), w_out.decode()[-3000:]
    # one progress for the run, not one per worker
    totals = set(re.findall(r"^progress: \d+/(\d+) rollouts done", err, re.M))
    assert totals == {"4"}, err[-3000:]
    for rid in IDS:
        assert re.search(rf"^{rid}: (ok|no_audio)", err, re.M), err[-3000:]
    # --concurrency auto: a gate per worker, each on its own loop
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["concurrency"] == "auto"
    gates = manifest["workers"]["concurrency_auto"]
    assert len(gates) == 2 and all(g and g["max_limit_reached"] >= 1 for g in gates), gates
    assert manifest["workers"]["fleet_view"]["events"] > 0
