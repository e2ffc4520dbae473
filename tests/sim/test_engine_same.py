"""The engine's chunk-wide block statistics change its cost, not its decisions: the same
truth records, replies and gate as the version before them (tests/sim/engine_v1.py, kept as
the oracle), over noise whose floor moves, tones, real speech, odd chunk sizes (blocks
carried across chunks), its own replies fed back as echo, and each policy."""

import numpy as np
import pytest
import soundfile as sf

from rig.sim.engine import Emit, SimConfig, SimEngine, Truth
from tests.sim.engine_v1 import SimEngine as Oracle

RATE = 16_000
NS = 1_000_000_000
SPEECH = np.concatenate(
    [sf.read(f, dtype="int16")[0] for f in ("rig/data/turn_what.wav", "rig/data/turn_weather.wav")]
)


def _input(rng: np.random.Generator, seconds: float) -> np.ndarray:
    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    # room noise whose level steps (the floor tracking follows it), from none to loud
    levels = rng.choice([0.0, 3.0, 60.0, 400.0], size=n // RATE + 1)
    x = rng.standard_normal(n) * np.repeat(levels, RATE)[:n]
    i = int(0.3 * RATE)
    while i < n:  # turns: speech, a tone or a buzz, then a pause
        d = int(rng.uniform(0.3, 2.0) * RATE)
        kind = rng.integers(3)
        if kind == 0:
            seg = np.resize(SPEECH[rng.integers(SPEECH.size - RATE) :], d).astype(float)
        elif kind == 1:
            seg = np.sin(2 * np.pi * rng.uniform(150, 900) * t[:d]) * rng.uniform(200, 9000)
        else:
            seg = np.sign(np.sin(2 * np.pi * 120 * t[:d])) * rng.uniform(100, 3000)
        x[i : i + d] += seg[: n - i]
        i += d + int(rng.uniform(0.1, 1.2) * RATE)
    return x


def _same(a: list, b: list) -> bool:
    """Truth lists equal field by field (the oracle's Truth is another class)."""
    return [(t.event, t.t_ns, t.data) for t in a] == [(t.event, t.t_ns, t.data) for t in b]


def _run(cfg: SimConfig, seed: int, sizes: tuple[int, ...], echo: float) -> list:
    rng = np.random.default_rng(seed)
    new, old = SimEngine(cfg), Oracle(cfg)
    user = _input(rng, 14.0)
    played = np.zeros(user.size + RATE)
    pos = 0
    while pos < user.size - 1000:
        n = int(rng.choice(sizes))
        t = (pos + n) * NS // RATE + int(rng.uniform(0, 8) * 1e6)
        a, b = new.poll(t), old.poll(t)
        assert _same(a[1], b[1]) and [e.t_ns for e in a[0]] == [e.t_ns for e in b[0]]
        for e, f in zip(a[0], b[0], strict=True):
            assert np.array_equal(e.pcm, f.pcm)
            new.said(t, e.pcm)
            old.said(t, f.pcm)
            at = pos + n + 640  # heard back 40 ms later
            played[at : at + e.pcm.size] += e.pcm[: max(0, played.size - at)]
        frame = user[pos : pos + n] + echo * played[pos : pos + n]
        pcm = np.clip(np.rint(frame), -32768, 32767).astype(np.int16)
        assert _same(new.on_audio(pcm, t), old.on_audio(pcm, t)), pos
        assert new._gate_now == old._gate_now and new._turn_sq == old._turn_sq
        assert (new._last_loud_sample, new._last_loud_t_ns) == (
            old._last_loud_sample,
            old._last_loud_t_ns,
        )
        pos += n
    assert _same(new.truths, old.truths)
    return new.truths


@pytest.mark.parametrize("sizes", [(320,), (160, 320, 333, 1000, 17, 640)])
@pytest.mark.parametrize(
    "cfg",
    [
        SimConfig(),
        SimConfig(self_echo_sensitive=True),
        SimConfig(noise_floor_margin_db=None),
        SimConfig(policy="always", reply_follow_level=True, whisper_below_dbfs=-30.0),
        SimConfig(policy="backchannel", yield_after_ms=120.0),
    ],
    ids=["default", "sensitive", "fixed_gate", "always", "backchannel"],
)
def test_the_same_truths_as_before(cfg: SimConfig, sizes: tuple[int, ...]) -> None:
    truths = _run(cfg, len(sizes), sizes, echo=0.3)
    assert sum(t.event == "speech_start" for t in truths) >= 3  # turns were heard


def test_the_gate_tracks_the_floor_as_before() -> None:
    """Noise only, its level stepping: the gate rises and falls with it, block by block."""
    rng = np.random.default_rng(9)
    new, old = SimEngine(SimConfig()), Oracle(SimConfig())
    gates = set()
    for k in range(1500):
        level = (0.0, 5.0, 80.0, 700.0)[(k // 150) % 4]
        pcm = np.rint(rng.standard_normal(320) * level).astype(np.int16)
        t = (k + 1) * 20_000_000
        assert _same(new.on_audio(pcm, t), old.on_audio(pcm, t))
        assert new._gate_now == old._gate_now
        gates.add(new._gate_now)
    assert len(gates) > 10 and max(gates) > 5 * min(gates)  # the floor moved, up and down


@pytest.mark.parametrize("echo", [0.0, 0.3, 1.0])
def test_the_same_truths_as_before_with_the_old_canceller_too(
    monkeypatch: pytest.MonkeyPatch, echo: float
) -> None:
    """End to end against both oracles (engine and canceller as they were): its own replies
    fed back as echo, or none, while the user's turns come and go over them."""
    from tests.sim import engine_v1, selfecho_v1

    monkeypatch.setattr(engine_v1, "OwnEchoCanceller", selfecho_v1.OwnEchoCanceller)
    truths = _run(SimConfig(), 3, (320,), echo=echo)
    assert sum(t.event == "speech_start" for t in truths) >= 3


@pytest.mark.parametrize("head", [None, 5, 7, 9])
@pytest.mark.parametrize("cancel", [None, 5, 7, 9])
def test_next_due_is_the_earliest_of_the_next_chunk_and_a_delayed_yield(
    head: int | None, cancel: int | None
) -> None:
    eng, oracle = SimEngine(SimConfig()), Oracle(SimConfig())
    for e in (eng, oracle):
        e._queue = [] if head is None else [Emit(-1, head, np.zeros(4, np.int16), 1)]
        e._cancel = None if cancel is None else Truth("reply_cancel", cancel, {})
    due = [t for t in (head, cancel) if t is not None]
    assert eng.next_due_ns() == oracle.next_due_ns() == (min(due) if due else None)
