"""`rig run --mqtt --device-clock` end to end: a real broker, `rig sim`, a simulated device
with its own clock, and `rig watch` in a third process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path

import pytest

from rig.telemetry.deviceclock import SimulatedDevice
from rig.telemetry.mqtt import parse_mqtt_url
from tests.support.broker import Broker, needs_broker
from tests.support.runexit import assert_run_ok
from tests.support.simproc import start_sim, stop_sim
from tests.support.wait import until

pytestmark = [pytest.mark.mqtt, pytest.mark.realtime]
MS = 1_000_000


@needs_broker
async def test_run_publishes_and_fits_the_device_clock(broker: Broker, tmp_path: Path) -> None:
    sim, url = start_sim("--latency-ms", "200", "--endpoint-silence-ms", "300", "--reply-s", "1")
    config = parse_mqtt_url(broker.url, env={})
    offset_ns, drift_ppm = 250 * MS + 123_457, 400.0
    device = SimulatedDevice(config, "mq", "dut", offset_ns=offset_ns, drift_ppm=drift_ppm)
    dev_task = asyncio.create_task(device.run())
    await asyncio.wait_for(device.ready.wait(), 5)
    watch = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rig", "watch", "--mqtt", broker.url, "--run", "mq",
        "--headless", "--exit-when-done", "--duration", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rig", "run", "rig/data/turn_what.wav", "--target", url,
        "--out", str(tmp_path), "--run-id", "mq", "--headless", "--mqtt", broker.url,
        "--device-clock", "dut", "--device-probe-interval-s", "0.1", "--drain-quiet-s", "0.8",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    emitted: list[int] = []
    try:
        # mid-run (the run's probes reach the device): it reports something on its own clock
        await until(lambda: device.answered >= 5, timeout_s=30, what="the run's clock probes")
        emitted.append(await device.emit("button", n=1))
        out, err = await asyncio.wait_for(run.communicate(), 60)
        w_out, w_err = await asyncio.wait_for(watch.communicate(), 30)
    finally:
        for p in (run, watch):
            if p.returncode is None:
                p.kill()
        dev_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await dev_task
        stop_sim(sim)
    assert_run_ok(run.returncode, err.decode(), tmp_path / "mq")
    # the watcher in another process saw the rollout run to the end
    assert watch.returncode == 0, w_err.decode()[-2000:]
    assert "turn_what" in w_out.decode() and "done" in w_out.decode()
    # the device clock, fitted like a server clock
    dc = json.loads((tmp_path / "mq" / "device_clock.json").read_text())
    assert dc["probes_answered"] >= 20
    fit = dc["fit"]
    assert not fit.get("refused"), fit
    assert fit["drift_ppm"] == pytest.approx(drift_ppm, abs=100)
    (ev,) = dc["events"]
    assert ev["device_ts_ns"] == emitted[0] and ev["name"] == "button"
    # its event lands where it happened on the shared clock (truth: invert the device clock)
    true_local = emitted[0] - offset_ns  # drift over the few seconds since t_ref is < 2 ms
    true_local -= round((true_local - device.t_ref_ns) * drift_ppm * 1e-6)
    assert abs(ev["t_ns"] - true_local) < 3 * MS
    assert ev["arrival_ns"] >= ev["t_ns"]
