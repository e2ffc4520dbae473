"""A calibration whose repeats disagree is measured again, up to `attempts`, and the refused
attempts stay in the result (a path's latency can move for a moment on a busy machine)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rig.device import loopback
from rig.device.calibrate import CalibrationRefused, summarize
from rig.device.loopback import LoopbackResult, measure_round_trip
from rig.device.model import StreamSettings
from rig.device.timeinfo import check_pa_clock

SETTINGS = StreamSettings(48_000, "cable", "cable")


def _result() -> LoopbackResult:
    return LoopbackResult(
        stats=summarize([10.0, 10.1, 10.2]),
        settings=SETTINGS,
        backend="fake",
        input_name="cable",
        output_name="cable",
        hostapi="fake",
        probe="chirp",
        detections=(),
        reported_input_latency_ms=None,
        reported_output_latency_ms=None,
        pa_clock_in=check_pa_clock([]),
        pa_clock_out=check_pa_clock([]),
    )


def _measurements(monkeypatch: pytest.MonkeyPatch, refusals: int) -> list[dict[str, Any]]:
    """The first `refusals` measurements disagree, the next one agrees."""
    calls: list[dict[str, Any]] = []

    async def once(backend: Any, settings: StreamSettings, **kw: Any) -> LoopbackResult:
        calls.append(kw)
        if len(calls) <= refusals:
            raise CalibrationRefused(f"repeats disagree: spread 1.{len(calls)} ms", [9.0, 10.5])
        return _result()

    monkeypatch.setattr(loopback, "_measure_once", once)
    return calls


def test_a_refused_measurement_is_made_again_and_kept_in_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _measurements(monkeypatch, refusals=2)
    result = asyncio.run(measure_round_trip(None, SETTINGS, repeats=4, attempts=3))  # type: ignore[arg-type]
    assert len(calls) == 3 and all(c["repeats"] == 4 for c in calls)
    assert result.refused == ("repeats disagree: spread 1.1 ms", "repeats disagree: spread 1.2 ms")
    doc = result.as_dict()
    assert doc["attempts"] == 3 and doc["refused_attempts"] == list(result.refused)
    assert doc["round_trip_ms"] == pytest.approx(10.1)


def test_every_attempt_refused_says_why_for_each(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _measurements(monkeypatch, refusals=5)
    with pytest.raises(CalibrationRefused, match=r"all 3 attempts refused: .*1\.1 ms.*1\.2.*1\.3"):
        asyncio.run(measure_round_trip(None, SETTINGS, attempts=3))  # type: ignore[arg-type]
    assert len(calls) == 3


def test_one_attempt_is_the_default_and_refuses_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _measurements(monkeypatch, refusals=1)
    with pytest.raises(CalibrationRefused, match=r"^repeats disagree: spread 1\.1 ms$"):
        asyncio.run(measure_round_trip(None, SETTINGS))  # type: ignore[arg-type]
    assert len(calls) == 1
    ok = asyncio.run(measure_round_trip(None, SETTINGS))  # type: ignore[arg-type]
    assert ok.refused == () and ok.as_dict()["attempts"] == 1
