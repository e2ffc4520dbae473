"""Self-interruption from a rollout's arrays: only echo on the uplink, and a signal or a turn."""

import numpy as np
import soundfile as sf

from rig.analysis.gates import gate_values
from rig.analysis.selfecho import analyze_self_echo, rate_line, run_rate, signals_from_events

RATE = 16_000
#: real speech for the user (webrtcvad does not take a tone for speech)
SPEECH = sf.read("rig/data/turn_what.wav", dtype="float32")[0]


def _tone(n: int, amp: float = 0.2, f: float = 300.0) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * f * np.arange(n) / RATE)).astype(np.float32)


def _tracks(user_spans, echo_spans, seconds=8.0):
    n = int(seconds * RATE)
    user, echo = np.zeros(n, np.float32), np.zeros(n, np.float32)
    for a, b in user_spans:
        i, j = int(a * RATE), int(b * RATE)
        user[i:j] += np.resize(SPEECH[8000:], j - i)
    for a, b in echo_spans:
        i, j = int(a * RATE), int(b * RATE)
        echo[i:j] += _tone(j - i, 0.05, 440)
    return user + echo, echo  # user.wav is what was sent: the user plus the echo


def test_a_signal_while_only_echo_is_on_the_uplink_counts() -> None:
    sent, echo = _tracks([(0.5, 2.0)], [(3.04, 3.2)])
    got = analyze_self_echo(sent, echo, RATE, [(3.0, 3.16)], [(3.15, "speech_started")])
    (row,) = got["per_response"]
    assert row["self_interrupted"] and row["by"] == "server_event"
    assert row["signal"] == "speech_started" and -32 < row["echo_dbfs"] < -26
    assert got["rate"] == 1.0


def test_a_signal_with_the_user_talking_is_a_barge_in_not_a_self_interruption() -> None:
    sent, echo = _tracks([(0.5, 2.0), (3.4, 4.5)], [(3.04, 4.0)])
    got = analyze_self_echo(sent, echo, RATE, [(3.0, 3.9)], [(3.6, "speech_started")])
    assert got["self_interruptions"] == 0


def test_a_new_turn_without_user_speech_is_a_self_turn() -> None:
    sent, echo = _tracks([(0.5, 2.0)], [(3.04, 3.34), (4.44, 4.74)])
    got = analyze_self_echo(sent, echo, RATE, [(3.0, 3.3), (4.4, 4.7)], [])
    first = got["per_response"][0]
    assert first["self_interrupted"] and first["by"] == "self_turn" and got["by_self_turn"] == 1


def test_no_echo_no_self_interruption_and_a_natural_end() -> None:
    sent, echo = _tracks([(0.5, 2.0), (5.0, 6.0)], [(3.04, 4.04)])
    got = analyze_self_echo(sent, echo, RATE, [(3.0, 4.0), (6.8, 7.5)], [])
    assert got["self_interruptions"] == 0 and got["responses"] == 2


def test_events_rates_lines_and_the_gate() -> None:
    events = [
        {"kind": "server.speech_started", "t_ns": 1_500_000_000, "source": "server"},
        {"kind": "server.response.start", "t_ns": 1_600_000_000, "source": "server"},
        {"kind": "speech_started", "t_ns": 1_700_000_000, "source": "rig"},
    ]
    assert signals_from_events(events, 1_000_000_000) == [(0.5, "speech_started")]
    block = {"self_echo": {"responses": 4, "self_interruptions": 1}}
    assert run_rate([{"timing": block}, {"timing": {}}]) == (1, 4)
    rate = {"evaluated": 4, "passed": 1, "rate": 0.25, "ci_low": 0.05, "ci_high": 0.7}
    assert rate_line(rate) == (
        "self-interruptions on own echo: 1 of 4 responses (25%, 95% CI 5%-70%, Wilson)"
    )
    assert gate_values({"overall": {"self_interruption": rate}})["self_interruption_rate"] == 0.25
    assert gate_values({})["self_interruption_rate"] is None
