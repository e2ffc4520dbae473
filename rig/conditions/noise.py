"""Noise beds: loops of unit-RMS noise that a condition scales to an SNR.

How this works: every noise is a loop of float samples at the uplink rate with RMS 1.0 over
the loop, indexed by a *noise position* that runs with the session timeline (so the noise
goes on through pauses, releases and drains, as a room's would) and wraps at the loop's end.
  white   Gaussian, numpy's PCG64 generator seeded from the run's seed (10 s loop)
  pink    1/f Gaussian noise from colorednoise (the `conditions` extra), same seed (10 s)
  babble  the suite's other turns: up to four "talkers", each the other turns (trimmed to
          their speech, each at the same RMS) in a seeded order, the talkers shifted by a
          quarter of the loop against each other and summed
  file    a WAV (any rate/channels: decoded like a turn), looped from its start
Everything is deterministic from the seed; the loops are cached per suite build.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.audio.source import load_wav
from rig.core.plan import speech_bounds
from rig.extras import require

F32 = npt.NDArray[np.float32]
LOOP_S = 10.0
BABBLE_TALKERS = 4


def rng(seed: int, *parts: Any) -> np.random.Generator:
    """A generator for one purpose, derived from the run's seed (stable across runs and
    Python versions: a hash of the parts, never Python's salted hash())."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _unit(x: npt.NDArray[Any]) -> F32:
    y = np.asarray(x, np.float64)
    y = y - y.mean()
    rms = float(np.sqrt(np.mean(np.square(y)))) if y.size else 0.0
    if rms <= 1e-9:
        raise ValueError("the noise is silent")
    out: F32 = (y / rms).astype(np.float32)
    return out


def white(rate: int, seed: int) -> F32:
    return _unit(rng(seed, "noise", "white").standard_normal(round(LOOP_S * rate)))


def pink(rate: int, seed: int) -> F32:
    require("conditions", 'noise kind = "pink"')
    import colorednoise

    n = round(LOOP_S * rate)
    return _unit(colorednoise.powerlaw_psd_gaussian(1.0, n, random_state=rng(seed, "pink")))


def from_file(path: str, rate: int) -> F32:
    return _unit(load_wav(path, rate).pcm.astype(np.float64) / 32768.0)


def babble(corpus: Sequence[Pcm16], rate: int, seed: int) -> F32:
    """Talkers made of `corpus` (the suite's other turns), summed; ValueError when empty."""
    parts = []
    for pcm in corpus:
        b = speech_bounds(pcm, rate)
        if b is not None and b[1] - b[0] > rate // 10:
            parts.append(_unit(pcm[b[0] : b[1]].astype(np.float64)))
    if not parts:
        raise ValueError("babble needs other turns with speech in the suite; there are none")
    gen = rng(seed, "babble")
    order = gen.permutation(len(parts))
    talker = np.concatenate([parts[i] for i in order]).astype(np.float64)
    if talker.size < rate:  # under a second of speech: repeat it to one second at least
        talker = np.tile(talker, -(-rate // talker.size))
    n = talker.size
    mix = np.zeros(n)
    for k in range(min(BABBLE_TALKERS, len(parts))):
        mix += np.roll(talker, k * n // BABBLE_TALKERS)
    return _unit(mix)


class NoiseCache:
    """The loops of one suite build, made once each."""

    def __init__(self, rate: int, seed: int) -> None:
        self.rate = rate
        self.seed = seed
        self._loops: dict[tuple[Any, ...], F32] = {}

    def loop(self, kind: str, file: str | None = None, corpus_key: Any = None,
             corpus: Sequence[Pcm16] = ()) -> F32:  # fmt: skip
        key = (kind, file, corpus_key)
        if key not in self._loops:
            if kind == "white":
                self._loops[key] = white(self.rate, self.seed)
            elif kind == "pink":
                self._loops[key] = pink(self.rate, self.seed)
            elif kind == "babble":
                self._loops[key] = babble(corpus, self.rate, self.seed)
            else:
                assert file is not None
                self._loops[key] = from_file(file, self.rate)
        return self._loops[key]


def overlay(loop: F32, start: int, n: int) -> npt.NDArray[np.float64]:
    """`n` samples of the loop from noise position `start` (wrapping)."""
    idx = (start + np.arange(n)) % loop.size
    return loop[idx].astype(np.float64)
