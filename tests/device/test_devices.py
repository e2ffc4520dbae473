"""Real virtual sound cards (scripts/ci/audio-up.sh): JACK dummy loopback and a Pulse null sink.

The JACK server runs its dummy backend with loopback ports: a sample-exact cable whose
round trip is one period. The PulseAudio null sink's monitor is the other cable, reached
through PortAudio's ALSA host API and the alsa "pulse" plugin.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rig.cli import main as rig_main
from rig.device.calibration_store import CalibrationStore, PathKey
from rig.device.loopback import measure_round_trip
from rig.device.model import StreamSettings
from rig.device.stream import get_backend
from rig.errors import DeviceError

pytestmark = pytest.mark.device

RATE = 48_000
BACKENDS = ["sounddevice", "pyaudio"]


def _device_names(backend: str) -> set[tuple[str, str]]:
    try:
        return {(d.hostapi, d.name) for d in get_backend(backend).devices()}
    except DeviceError:
        return set()


def _need(backend: str, hostapi_prefix: str, name: str) -> None:
    if not any(h.startswith(hostapi_prefix) and n == name for h, n in _device_names(backend)):
        pytest.skip(
            f"{hostapi_prefix} device {name!r} not found via {backend}: "
            "start the virtual cards with scripts/ci/audio-up.sh"
        )


def _jack_period_ms() -> float:
    exe = shutil.which("jack_bufsize")
    if exe is None:
        pytest.skip("jack_bufsize not installed")
    out = subprocess.run(
        [exe], capture_output=True, text=True, timeout=10, env={"JACK_NO_START_SERVER": "1"}
    ).stdout
    frames = int(out.split()[-1])
    return frames / RATE * 1e3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("duplex", [True, False], ids=["duplex", "split"])
async def test_jack_loopback_round_trip_is_one_period(backend: str, duplex: bool) -> None:
    _need(backend, "JACK", "loopback")
    period_ms = _jack_period_ms()
    result = await measure_round_trip(
        get_backend(backend),
        StreamSettings(RATE, "JACK:loopback", "JACK:loopback", duplex=duplex),
        repeats=4,
        max_spread_ms=0.5,
        attempts=3,
    )
    # the dummy backend's loopback ports return audio one period later
    assert abs(result.stats.mean_ms - period_ms) <= period_ms
    assert result.stats.spread_ms <= 0.5
    assert result.stats.repeats == 4
    if duplex:  # one callback serves both directions: the round trip is the sample lag
        assert result.stats.mean_ms == pytest.approx(period_ms, abs=0.05)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_pulse_null_sink_monitor_repeats_within_1ms(backend: str) -> None:
    _need(backend, "ALSA", "rig_cable")
    result = await measure_round_trip(
        get_backend(backend),
        StreamSettings(RATE, "ALSA:rig_cable", "ALSA:rig_cable"),
        repeats=4,
        max_spread_ms=1.0,
        attempts=3,
    )
    assert result.stats.spread_ms <= 1.0
    assert 0.0 < result.stats.mean_ms < 500.0
    # Pulse's ADC time through the ALSA plugin is not on a clock we can use; it is reported,
    # and the check says whether it was usable rather than trusting it blindly
    assert result.pa_clock_in.reason


def test_cli_calibrate_json_and_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _need("sounddevice", "JACK", "loopback")
    code = rig_main(
        [
            "calibrate",
            "--device",
            "JACK:loopback",
            "--duplex",
            "--repeats",
            "3",
            "--json",
            "--store",
            str(tmp_path),
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("round_trip_ms", "spread_ms", "repeats", "reported_latency_ms"):
        assert key in doc
    assert doc["repeats"] == 3
    ir = doc["impulse_response"]  # the loopback's response, kept for --cancel-own-echo
    assert ir["rate"] == RATE and ir["peak_ms"] == pytest.approx(doc["round_trip_ms"], abs=0.1)
    assert ir["gain_db"] == pytest.approx(-1.0, abs=0.5)  # a wire, in the probe's band
    stored = CalibrationStore(tmp_path).load(PathKey.from_result(doc))
    assert stored is not None
    assert stored["calibration"]["round_trip_ms"] == doc["round_trip_ms"]


def test_cli_devices_json(capsys: pytest.CaptureFixture[str]) -> None:
    _need("sounddevice", "JACK", "loopback")
    assert rig_main(["devices", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = {(d["hostapi"], d["name"]) for d in doc["devices"]}
    assert ("JACK Audio Connection Kit", "loopback") in names
    assert any(h["name"].startswith("JACK") for h in doc["hostapis"])


@pytest.mark.parametrize("backend", BACKENDS)
async def test_missing_device_is_a_clear_error(backend: str) -> None:
    _need(backend, "JACK", "loopback")
    with pytest.raises(DeviceError, match="no output device matches 'no-such-card'"):
        await measure_round_trip(
            get_backend(backend), StreamSettings(RATE, "JACK:loopback", "no-such-card")
        )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_bad_rate_and_channels_are_clear_errors(backend: str) -> None:
    _need(backend, "JACK", "loopback")
    be = get_backend(backend)
    with pytest.raises(DeviceError, match="refuses 44100 Hz"):
        await measure_round_trip(be, StreamSettings(44_100, "JACK:loopback", "JACK:loopback"))
    with pytest.raises(DeviceError, match="3 input channels requested, the device has 2"):
        await measure_round_trip(
            be, StreamSettings(RATE, "JACK:loopback", "JACK:loopback", in_channels=3)
        )


def test_cli_reports_a_missing_device(capsys: pytest.CaptureFixture[str]) -> None:
    _need("sounddevice", "JACK", "loopback")
    assert rig_main(["calibrate", "--input", "JACK:loopback", "--output", "nope-42"]) == 1
    assert "no output device matches 'nope-42'" in capsys.readouterr().err
