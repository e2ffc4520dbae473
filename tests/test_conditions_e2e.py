"""Input conditions and reply voice measures end to end against `rig sim` (issue #30's
done-when): a whispered turn (-35 dBFS RMS), a shouted one (peak -1 dBFS), a phone-line turn
and a turn in pink noise at 5 dB SNR; user.wav measures within 0.5 dB of each target; the
report shows each reply's level against the system's own and its whisper verdict; a rerun
with the same seed (against a sim replying 12 dB quieter) sends byte-identical audio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.scenarios import data_path
from tests.support.simproc import start_sim, stop_sim

pytest.importorskip("parselmouth")
pytest.importorskip("scipy")
pytest.importorskip("colorednoise")

RATE = 16_000
SCENARIO = """
[suite]
name = "conditions"
[defaults]
pad_before_s = 0.3
max_s = 40
drain_quiet_s = 1.5
drain_max_s = 5
[[items]]
id = "voices"
kind = "turn_taking"
steps = [
  {{ type = "turn", file = "{q}", label = "normal" }},
  {{ type = "pause", seconds = 1.5 }},
  {{ type = "turn", file = "{q}", label = "whisper", condition = {{ target_rms_dbfs = -35 }} }},
  {{ type = "pause", seconds = 1.5 }},
  {{ type = "turn", file = "{q}", label = "shout", condition = {{ target_peak_dbfs = -1 }} }},
  {{ type = "pause", seconds = 1.5 }},
  {{ type = "turn", file = "{p}", label = "phone", condition = {{ line = "phone" }} }},
  {{ type = "drain" }},
]
[[items]]
id = "noisy"
kind = "turn_taking"
condition = {{ noise = {{ kind = "pink", snr_db = 5 }} }}
steps = [
  {{ type = "turn", file = "{q}", label = "pink5" }},
  {{ type = "drain" }},
]
"""


def run(tmp_path: Path, url: str, run_id: str, *extra: str) -> Path:
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "rig", "run", str(tmp_path / "s.toml"), "--target", url,
         "--out", str(out), "--run-id", run_id, "--headless", "--seed", "7",
         "--retry-invalid", "2", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return out / run_id


def spans(rollout: Path) -> dict[str, tuple[int, int]]:
    """Each turn's speech span on user.wav (the turn marks' samples)."""
    events = [json.loads(x) for x in (rollout / "events.jsonl").read_text().splitlines()]
    starts = {e["turn"]: e for e in events if e["kind"] == "turn.start"}
    ends = {e["turn"]: e for e in events if e["kind"] == "turn.end"}
    return {starts[k]["label"]: (starts[k]["sample"], ends[k]["sample"]) for k in starts}


def db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean((x.astype(np.float64) / 32768) ** 2))


@pytest.mark.realtime
def test_conditions_and_reply_voice_against_rig_sim(tmp_path: Path) -> None:
    text = SCENARIO.format(
        q=data_path("timing", "question.wav"), p=data_path("timing", "pause_a.wav")
    )
    (tmp_path / "s.toml").write_text(text)
    # A follows the user's level and whispers back below -30 dBFS; B replies 12 dB quieter
    sim_a, url_a = start_sim("--reply-voice", "buzz", "--reply-tone-hz", "150", "--reply-s", "0.6",
                             "--reply-follow-level", "--whisper-below-dbfs", "-30")  # fmt: skip
    sim_b, url_b = start_sim("--reply-voice", "buzz", "--reply-tone-hz", "150", "--reply-s", "0.6",
                             "--reply-gain-db", "-12")  # fmt: skip
    try:
        a = run(tmp_path, url_a, "a")
        b = run(tmp_path, url_b, "b")
    finally:
        stop_sim(sim_a)
        stop_sim(sim_b)
    voices, noisy = a / "rollouts" / "voices", a / "rollouts" / "noisy"
    user, _ = sf.read(voices / "user.wav", dtype="int16")
    s = spans(voices)
    # the targets, measured on what was sent
    assert abs(db(user[slice(*s["whisper"])]) + 35.0) < 0.5
    assert (
        abs(20 * np.log10(np.abs(user[slice(*s["shout"])].astype(float)).max() / 32768) + 1) < 0.5
    )
    nu, _ = sf.read(noisy / "user.wav", dtype="int16")
    clean, _ = sf.read(noisy / "user_clean.wav", dtype="int16")
    lo, hi = spans(noisy)["pink5"]
    speech = clean[lo:hi].astype(np.float64)
    snr = 10 * np.log10(np.sum(speech**2) / np.sum((nu[lo:hi] - speech) ** 2))
    assert abs(snr - 5.0) < 0.5
    assert db(nu[hi + RATE // 2 : hi + RATE]) > -45  # the room goes on after the turn
    # the phone turn holds nothing above 4 kHz
    ph = user[slice(*s["phone"])].astype(np.float64)
    spec = np.abs(np.fft.rfft(ph)) ** 2
    f = np.fft.rfftfreq(ph.size, 1 / RATE)
    assert np.sum(spec[f > 4200]) < 1e-4 * np.sum(spec[(f > 300) & (f < 3400)])
    # every condition and its measured result in metrics.json and the manifest
    m = json.loads((voices / "metrics.json").read_text())
    recs = {t["label"]: t for t in m["conditions"]["turns"]}
    assert recs["whisper"]["level"]["rms_dbfs"] == pytest.approx(-35.0, abs=0.01)
    assert recs["shout"]["level"]["peak_dbfs"] == pytest.approx(-1.0, abs=0.01)
    manifest = json.loads((a / "manifest.json").read_text())
    noisy_rec = manifest["rollouts"]["noisy"]["meta"]["conditions"]["turns"][0]
    assert noisy_rec["noise"]["achieved_snr_db"] == pytest.approx(5.0, abs=0.05)
    # the timing analysis timed the user on the clean track: every turn answered
    assert all(r["latency_ms"] is not None for r in m["timing"]["responses"])
    # reply voice: sim A whispered back to the whispered turn, and spoke up for the shout
    replies = {r["turn"]: r for r in m["timing"]["voice"]["replies"]}
    assert replies[1]["whisper"] is True and replies[0]["whisper"] is False
    assert replies[2]["rms_dbfs"] > replies[0]["rms_dbfs"] > replies[1]["rms_dbfs"] + 8
    rep = subprocess.run([sys.executable, "-m", "rig", "report", str(a), "--json"],
                         capture_output=True, text=True)  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    voice = json.loads(rep.stdout)["voice"]
    rows = {(r["rollout_id"], r["label"]): r for r in voice["replies"]}
    assert rows[("voices", "whisper")]["rel_db"] < -8 and rows[("voices", "whisper")]["lowered"]
    assert rows[("voices", "whisper")]["whisper"] is True
    text_report = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(a), "--fail-under", "whisper_rate=0.1",
         "--max", "reply_rel_db_median=5"], capture_output=True, text=True,
    )  # fmt: skip
    assert text_report.returncode == 0, text_report.stdout + text_report.stderr
    assert "reply voice" in text_report.stdout and "rms -35" in text_report.stdout
    # one of four conditioned turns got a lowered reply: a 0.5 gate on it fails
    gated = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(a), "--fail-under", "lowered_rate=0.5"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert gated.returncode == 1 and "lowered_rate = 0.25" in gated.stderr, gated.stderr
    # sim B: every reply 12 dB under the tone's -12 dBFS, none whispered
    mb = json.loads((b / "rollouts" / "voices" / "metrics.json").read_text())
    for r in mb["timing"]["voice"]["replies"]:
        assert r["rms_dbfs"] == pytest.approx(-24.0, abs=0.5) and r["whisper"] is False
    # same seed, same uplink bytes: up to the end of the last turn (the drain's end is the
    # system's timing), whatever the system answered
    for rid in ("voices", "noisy"):
        ua, _ = sf.read(a / "rollouts" / rid / "user.wav", dtype="int16")
        ub, _ = sf.read(b / "rollouts" / rid / "user.wav", dtype="int16")
        end = max(e for _, e in spans(a / "rollouts" / rid).values()) + RATE // 2
        assert ua[:end].tobytes() == ub[:end].tobytes(), rid
