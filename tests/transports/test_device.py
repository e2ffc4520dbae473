"""The sound-card transport on real virtual cards (scripts/ci/audio-up.sh).

Full rollout: rig -> rig_uplink (null sink) -> its monitor -> `rig sim --transport device`,
sim -> rig_downlink -> its monitor -> rig. Both cables are calibrated first; the composed
round trip is subtracted and the result compared with the sim's ground truth. Then device
loss (a private null sink unloaded mid-run) and bad parameters.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.cli import main as rig_main
from rig.device.calibration import compose_calibration, load_calibration
from rig.device.calibration_store import PathKey
from rig.device.loopback import measure_round_trip
from rig.device.model import StreamSettings
from rig.device.options import DeviceOptions
from rig.device.stream import get_backend
from rig.device.timeinfo import LiveClock, PlayLog
from rig.errors import ConfigError, DeviceError
from rig.recordings.wav import read_wav
from rig.sim.truth import read_truth
from rig.transports.device import DeviceTransport
from tests.support.runexit import assert_run_ok
from tests.support.wait import wait_for

RATE = 48_000
WAV = os.path.join("rig", "data", "turn_what.wav")


def _names() -> set[tuple[str, str]]:
    try:
        return {(d.hostapi, d.name) for d in get_backend("sounddevice").devices()}
    except DeviceError:
        return set()


def _need(hostapi: str, *names: str) -> None:
    have = _names()
    for name in names:
        if not any(h.startswith(hostapi) and n == name for h, n in have):
            pytest.skip(
                f"{hostapi} device {name!r} not found: start the virtual cards with "
                "scripts/ci/audio-up.sh"
            )


# ---------------------------------------------------------------------------- pure parts


def test_play_log_maps_queued_samples_to_stream_frames() -> None:
    log = PlayLog()
    assert log.push(100) == 0 and log.push(50) == 100
    log.on_block(1000, 64, 64)  # queue index 0..63 -> frames 1000..1063
    log.on_block(1064, 64, 64)
    log.on_block(1128, 64, 22)  # ran dry after 22
    log.on_block(1192, 64, 0)
    assert log.frame_of(0) == 1000
    assert log.frame_of(70) == 1070
    assert log.frame_of(149) == 1149
    assert log.frame_of(150) is None and log.empty
    assert log.push(10) == 150
    assert log.predict_frame(150) == 1256
    log.on_block(1256, 64, 10)
    assert log.frame_of(155) == 1261


def test_live_clock_takes_the_lower_envelope_and_needs_a_full_steady_window() -> None:
    clk = LiveClock(1000, window_s=0.1)
    # block stamps: frames every 10, stamped 5 ms late except one on time
    for i, late in enumerate([0, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]):
        clk.add(i * 10, 1_000_000_000 + i * 10_000_000 + late * 1_000_000)
    assert clk.steady()
    # the on-time block (frame 0) left the 100-frame window: the envelope is 5 ms late
    assert clk.time_ns(110) == 1_000_000_000 + 110 * 1_000_000 + 5_000_000
    clk.add(120, 1_000_000_000 + 500_000_000)  # a stall
    assert not clk.steady()


def test_calibration_file_must_match_the_path(tmp_path: Path) -> None:
    cable: dict[str, Any] = {
        "backend": "sounddevice",
        "hostapi": "ALSA",
        "rate": RATE,
        "blocksize": 0,
        "latency": "high",
        "duplex": False,
        "repeats": 4,
        "spread_ms": 0.1,
    }
    up = {**cable, "input": "up", "output": "up", "round_trip_ms": 30.0}
    down = {**cable, "input": "down", "output": "down", "round_trip_ms": 40.0}
    doc = compose_calibration(up, down)
    assert doc["round_trip_ms"] == 70.0 and (doc["input"], doc["output"]) == ("down", "up")
    f = tmp_path / "cal.json"
    f.write_text(json.dumps(doc))
    key = PathKey("sounddevice", "ALSA", "down", "up", RATE, 0, "high", False)
    cal = load_calibration(str(f), key)
    assert cal is not None and cal.round_trip_ms == 70.0
    assert load_calibration("none", key) is None
    assert load_calibration("auto", key, tmp_path / "empty-store") is None
    other = PathKey("sounddevice", "ALSA", "down", "up", 44_100, 0, "high", False)
    with pytest.raises(ConfigError, match="rate 48000 != 44100"):
        load_calibration(str(f), other)


# ---------------------------------------------------------------------------- real cards


def _start_sim(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    truth = str(tmp_path / "truth.jsonl")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "rig", "sim", "--transport", "device",
            "--input", "ALSA:rig_uplink", "--output", "ALSA:rig_downlink",
            "--truth-log", truth, *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on device" not in line:
        proc.kill()
        pytest.fail(f"device sim did not start: {line!r}")
    return proc, truth


async def _calibrate(name: str) -> dict[str, Any]:
    result = await measure_round_trip(
        get_backend("sounddevice"), StreamSettings(RATE, name, name), repeats=4, attempts=3
    )
    return result.as_dict()


@pytest.mark.device
def test_rollout_over_two_cables_matches_ground_truth(tmp_path: Path) -> None:
    _need("ALSA", "rig_uplink", "rig_downlink")
    up = asyncio.run(_calibrate("rig_uplink"))
    down = asyncio.run(_calibrate("rig_downlink"))
    cal_file = tmp_path / "path.json"
    cal_file.write_text(json.dumps(compose_calibration(up, down)))

    proc, truth_path = _start_sim(
        tmp_path, "--latency-ms", "300", "--endpoint-silence-ms", "400", "--reply-s", "0.6"
    )
    try:
        r = subprocess.run(
            [
                sys.executable, "-m", "rig", "run", WAV, "--transport", "device",
                "--output", "ALSA:rig_uplink", "--input", "ALSA:rig_downlink",
                "--calibration", str(cal_file), "--out", str(tmp_path / "out"),
                "--run-id", "run", "--headless", "--drain-quiet-s", "0.8", "--max-s", "20",
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        proc.send_signal(2)
        proc.wait(10)
    d = tmp_path / "out" / "run" / "rollouts" / "turn_what"
    assert_run_ok(r.returncode, r.stderr, tmp_path / "out" / "run")
    m = json.loads((d / "metrics.json").read_text())
    truth = read_truth(truth_path)
    end = next(t for t in truth if t["event"] == "speech_end")
    first = next(t for t in truth if t["event"] == "reply_chunk")
    true_ms = (first["t_dev_ns"] - end["audio_end_dev_ns"]) / 1e6
    (resp,) = m["responses"]
    rt = up["round_trip_ms"] + down["round_trip_ms"]
    assert m["device_round_trip_ms"] == pytest.approx(rt)
    assert resp["latency_device_corrected_ms"] == pytest.approx(
        resp["latency_device_ms"] - rt, abs=1e-3
    )
    print(
        f"cables {up['round_trip_ms']:.2f} + {down['round_trip_ms']:.2f} ms; "
        f"device path {resp['latency_device_ms']:.2f} ms, corrected "
        f"{resp['latency_device_corrected_ms']:.2f} ms, truth {true_ms:.2f} ms, "
        f"error {resp['latency_device_corrected_ms'] - true_ms:+.2f} ms; "
        f"uncorrected latency_ms {resp['latency_ms']:.2f}"
    )
    assert resp["latency_device_corrected_ms"] == pytest.approx(true_ms, abs=10.0)
    # without the correction the device path is off by the round trip: the test can fail
    assert abs(resp["latency_device_ms"] - true_ms) > 10.0
    # the recording holds the reply, and every chunk carries its device placement
    chunks = [json.loads(line) for line in (d / "chunks.jsonl").read_text().splitlines()]
    ups = [c for c in chunks if c["dir"] == "up"]
    downs = [c for c in chunks if c["dir"] == "down"]
    assert all("t_out_est_ns" in c for c in ups) and all("frame" in c for c in downs)
    assert max(c["level_dbfs"] for c in downs) > -20.0  # the -12 dBFS reply tone
    assert m["device"]["calibration"]["source"] == str(cal_file)
    assert m["device"]["xrun_total"] == m["device_xruns"]


@pytest.mark.device
def test_device_loss_ends_the_rollout_with_device_error(tmp_path: Path) -> None:
    """A private JACK server (its own name, dummy backend, loopback ports) killed mid-run.

    (Unloading a Pulse null sink is not a loss: Pulse moves the stream to the fallback sink
    and the rollout carries on.)"""
    _need("JACK", "loopback")
    if shutil.which("jackd") is None or shutil.which("jack_lsp") is None:
        pytest.skip("jackd not installed")
    server = f"rigloss{os.getpid()}"
    env = {**os.environ, "JACK_DEFAULT_SERVER": server, "JACK_NO_START_SERVER": "1"}
    jackd = subprocess.Popen(
        ["jackd", "--no-realtime", "-n", server, "-L", "2",
         "-d", "dummy", "-r", str(RATE), "-p", "256", "-w", "5333"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "jackd.log", "w"),
    )  # fmt: skip
    try:

        def jack_up() -> bool:
            ports = ["jack_lsp", "loopback:capture_1"]
            if not subprocess.run(ports, env=env, capture_output=True, timeout=5).returncode:
                return True
            if jackd.poll() is not None:  # it gave up: say why
                log = (tmp_path / "jackd.log").read_text()
                if "Too many servers" in log:  # JACK's shm registry is full on this host
                    pytest.skip(f"cannot start a private JACK server: {log.strip()[-200:]}")
                pytest.fail(f"private jackd did not start: {log[-500:]}")
            return False

        wait_for(jack_up, timeout_s=10, every_s=0.2, what="the private jackd's loopback ports")
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "rig", "run", WAV, "--transport", "device",
                "--output", "JACK:loopback", "--input", "JACK:loopback",
                "--calibration", "none", "--out", str(tmp_path / "out"), "--run-id", "run",
                "--headless", "--max-s", "20",
            ],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        d = tmp_path / "out" / "run" / "rollouts" / "turn_what"

        def recording() -> bool:  # until audio is recorded (or the run ended on its own)
            p = d / "chunks.jsonl"
            return proc.poll() is not None or (
                p.exists() and p.read_text().count('"dir":"down"') > 100
            )

        wait_for(recording, timeout_s=20, every_s=0.1, what="the rollout to record audio")
        jackd.terminate()  # the device goes away (a clean exit keeps JACK's registry tidy)
        jackd.wait(10)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"rig run did not end after the device was lost: {err[-1500:]}")
    finally:
        if jackd.poll() is None:
            jackd.kill()
            jackd.wait(10)
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "device_error", (m.get("reason"), err[-1500:])
    assert "device lost" in m["reason"]
    assert proc.returncode == 3
    # what was recorded is kept
    chunks = (d / "chunks.jsonl").read_text().splitlines()
    assert sum('"dir":"up"' in c for c in chunks) > 10
    assert sum('"dir":"down"' in c for c in chunks) > 100
    assert (d / "user.wav").stat().st_size > 44
    assert "device.lost" in (d / "events.jsonl").read_text()


@pytest.mark.device
def test_bad_parameters_are_clear_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """A device that refuses is a failure (exit 1); a missing option is a usage error (2)."""
    _need("JACK", "loopback")
    base = ["run", WAV, "--transport", "device", "--headless", "--out", "/nonexistent"]
    cases = [
        (["--output", "no-such-card", "--input", "JACK:loopback"], "no output device matches", 1),
        (["--output", "JACK:loopback", "--input", "JACK:loopback", "--sample-rate", "44100"],
         "refuses 44100 Hz", 1),
        (["--output", "JACK:loopback", "--input", "JACK:loopback", "--channels", "3"],
         "3 input channels requested, the device has 2", 1),
        (["--output", "JACK:loopback"], "needs --output DEV and --input DEV", 2),
    ]  # fmt: skip
    for extra, message, code in cases:
        assert rig_main([*base, *extra]) == code, extra
        assert message in capsys.readouterr().err
    with pytest.raises(DeviceError, match="no input device matches 'nope'"):
        DeviceTransport(DeviceOptions(output="JACK:loopback", input="nope"), clock=None)  # type: ignore[arg-type]
    assert rig_main(["sim", "--transport", "device", "--input", "nope", "--output", "x"]) == 1
    assert "no input device matches 'nope'" in capsys.readouterr().err


@pytest.mark.device
async def test_jack_transport_round_trip_is_one_period_and_stamps_are_continuous() -> None:
    """The transport alone on JACK's sample-exact loopback: what it plays comes back one
    period later on the shared clock, as the transport places it."""
    _need("JACK", "loopback")
    from rig.clock.base import MonotonicClock

    clock = MonotonicClock()
    t = DeviceTransport(
        DeviceOptions(output="JACK:loopback", input="JACK:loopback", lead_ms=20),
        clock,
        calibration="none",
    )
    await t.open()
    tone = (8000 * np.sin(2 * np.pi * 1000 * np.arange(960) / RATE)).astype(np.int16)
    got: list[Any] = []
    try:
        sent = await t.send_audio(tone, 0, clock.now_ns())
        async for item in t.receive():
            if hasattr(item, "pcm"):
                got.append(item)
            if len(got) and got[-1].t_ns > sent + 300_000_000:
                break
    finally:
        await t.close()
    frames = [g.extra["frame"] for g in got]
    assert frames == sorted(frames)
    pcm = np.concatenate([g.pcm for g in got])
    loud = int(np.flatnonzero(np.abs(pcm) > 1000)[0])
    t_in = got[0].t_ns + loud * 1e9 / RATE
    t_out = t.link.exact_ns("out", t.link.play_log.frame_of(t.link.lead_frames) or 0)
    period_ms = 256 / RATE * 1e3
    assert (t_in - t_out) / 1e6 == pytest.approx(period_ms, abs=period_ms)


@pytest.mark.device
@pytest.mark.parametrize(
    ("backend", "duplex"),
    [("sounddevice", False), ("pyaudio", False), ("sounddevice", True)],
    ids=["sounddevice", "pyaudio", "sounddevice-duplex"],
)
def test_both_backends_carry_a_rollout_over_the_jack_loopback(
    tmp_path: Path, backend: str, duplex: bool
) -> None:
    """The JACK loopback returns what the rig plays: the recording must hold the user's own
    speech, one round trip later, with no xruns, whichever PortAudio binding runs it, on two
    streams or one full-duplex stream."""
    _need("JACK", "loopback")
    if backend == "pyaudio":
        pytest.importorskip("pyaudio")
    r = subprocess.run(
        [
            sys.executable, "-m", "rig", "run", WAV, "--transport", "device",
            "--backend", backend, "--output", "JACK:loopback", "--input", "JACK:loopback",
            "--calibration", "none", "--out", str(tmp_path), "--run-id", "run", "--headless",
            "--max-s", "15", "--drain-quiet-s", "0.5", *(["--duplex"] if duplex else []),
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    d = tmp_path / "run" / "rollouts" / "turn_what"
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "ok", (m.get("reason"), r.stderr[-1500:])
    assert m["transport"]["backend"] == backend
    assert m["transport"]["options"]["duplex"] is duplex
    # xruns are the machine's scheduling (a shared 2-core CI box has them now and then); what
    # must hold is that each one is recorded and the rollout's own timing is flagged for it
    events = (d / "events.jsonl").read_text()
    assert ('"kind":"server.device.xrun"' in events) == (m["device_xruns"] > 0)
    if m["device_xruns"]:
        assert m["timing_valid"] is False
        assert any("sound-card xrun" in r for r in m["rig_timing"]["reasons"]), m["rig_timing"]
    user, rate = read_wav(str(d / "user.wav"))
    system, sys_rate = read_wav(str(d / "system.wav"))
    assert rate == sys_rate == RATE
    # where is the user's speech in what came back? (the loopback is sample-exact)
    n = min(len(user), len(system))
    u = user[:n].astype(np.float64)
    s = system[:n].astype(np.float64)
    max_lag = int(0.2 * RATE)
    corr = [float(np.dot(u[: n - k], s[k:])) for k in range(0, max_lag, 8)]
    k = int(np.argmax(corr)) * 8
    coeff = corr[k // 8] / (np.linalg.norm(u[: n - k]) * np.linalg.norm(s[k:]) + 1e-9)
    assert coeff > 0.8, coeff  # the recording holds the user's own audio...
    assert 0 < k < 0.1 * RATE, k  # ...a round trip later, on the session timeline
