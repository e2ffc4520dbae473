"""A transport's own reasons (the residual own echo: rig.transports.deviceecho) make a
rollout's timing not valid, with the reason, like a sound-card xrun."""

from rig.core.loopmonitor import LoopMonitor
from rig.core.selfcheck import TimingTolerance, judge_session


def test_a_transport_reason_makes_the_timing_not_valid() -> None:
    tol = TimingTolerance()
    base = {"uplink": {"lateness_ms": {"p99": 0.1}, "stalls": 0}, "device_xruns": 0}
    ok = judge_session(base, None, None, LoopMonitor(), tol)
    why = "residual own echo peaks at -31.0 dBFS: the device cannot be told from the rig"
    bad = judge_session({**base, "transport_timing_reasons": [why]}, None, None, LoopMonitor(), tol)
    assert why not in ok.reasons
    assert not bad.valid and why in bad.reasons
