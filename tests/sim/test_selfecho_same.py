"""The canceller's buffers and shortcuts change its cost, not its output: against the
version before them (tests/sim/selfecho_v1.py, kept as the oracle), chunk by chunk, with
and without echo, over lag jumps, double talk, gaps in the reply, late and odd-sized
chunks and quiet (not hearable) ones. Without the no-echo shortcut (QUIET_RHO 0) the two
agree in every bit of output and state; with it, in every bit of output, in every fit that
passes and in all state once an echo has been found (before that the lag a failed search
leaves behind is not used: a failed chunk passes as it came)."""

import numpy as np
import pytest

from rig.sim import selfecho
from rig.sim.selfecho import OwnEchoCanceller
from tests.sim.selfecho_v1 import OwnEchoCanceller as Oracle

RATE = 16_000
NS = 1_000_000_000
SIZES = (320, 320, 640, 160, 318, 322)  # odd sizes too: the decimation's phase moves


def _reply(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    t = np.arange(n) / RATE
    if kind == "tone":
        x = np.sin(2 * np.pi * 440 * t) * 8000
    elif kind == "buzz":
        x = sum(np.sin(2 * np.pi * 220 * k * t) / k for k in range(1, 12)) * 5000
    else:  # noise-like, in bursts (a speech-like envelope)
        x = rng.standard_normal(n) * 4000 * (np.sin(2 * np.pi * 3 * t) > -0.3)
    return np.clip(x, -32768, 32767).astype(np.int16)


class _Counted(OwnEchoCanceller):
    """Counts searches, and checks the claim that lets a search with no echo in sight skip
    the fit at the last lag (no echo ever found): that fit fails."""

    searches = 0
    skipped_fits = 0

    def _search(self) -> tuple[int | None, bool]:
        self.searches += 1
        found = super()._search()
        if self._gain2 is None and self.lag is not None and found[0] is not None:
            if not found[1]:  # `_fit` skips the fit at the last lag: it must fail
                x = self._x[-selfecho.WINDOW :] / 32768.0
                assert self._fit_at(self.lag, x, float(x @ x)) is None
                self.skipped_fits += 1
        return found


class _CountedOracle(Oracle):
    searches = 0

    def _search(self) -> int | None:
        self.searches += 1
        return super()._search()


def _run(seed: int, kind: str, echo: bool, sizes: tuple[int, ...], seconds: float = 12.0):
    rng = np.random.default_rng(seed)
    new, old = _Counted(RATE), _CountedOracle(RATE)
    exact = selfecho.QUIET_RHO == 0
    said = np.zeros(int(seconds * RATE) + RATE, np.int16)
    reply = _reply(rng, said.size, kind)
    on = np.zeros(said.size, bool)  # replies of 1-2 s with gaps between
    i = int(0.5 * RATE)
    while i < said.size:
        d = int(rng.uniform(1.0, 2.0) * RATE)
        on[i : i + d] = True
        i += d + int(rng.uniform(0.3, 1.5) * RATE)
    said[on] = reply[on]
    delay = int(rng.uniform(0.03, 0.25) * RATE)
    pos, k, out_pos, level = 0, 0, 0, 0.0
    while pos < said.size - 2 * RATE:
        n = int(rng.choice(sizes))
        t_ns = (pos + n) * NS // RATE + int(rng.uniform(0, 12) * 1e6)  # jitter: late arrivals
        while out_pos < pos + n + 320:  # the reply leaves in 20 ms chunks, ahead, a few late
            late = int(rng.uniform(25, 40) * 1e6) if rng.random() < 0.003 else 0
            chunk = said[out_pos : out_pos + 320]
            t_out = (out_pos - 320) * NS // RATE + late
            new.played(t_out, chunk)
            old.played(t_out, chunk)
            out_pos += 320
        if k == 300:  # the playback jumps: a new round trip
            delay += int(rng.uniform(-0.02, 0.05) * RATE)
        if rng.random() < 0.06:  # the user starts or stops talking (over a reply, or alone)
            level = 0.0 if level else float(rng.choice([300.0, 3000.0]))
        user = rng.standard_normal(n) * level
        frame = user.copy()
        if echo:
            lo = pos - delay
            e = said[max(0, lo) : max(0, lo + n)].astype(np.float64)
            frame[n - e.size :] += 0.3 * e
        pcm = np.clip(np.rint(frame), -32768, 32767).astype(np.int16)
        hearable = rng.random() < 0.9
        a = new.clean(pcm, t_ns, hearable=hearable)
        b = old.clean(pcm, t_ns, hearable=hearable)
        assert np.array_equal(a, b) and a.dtype == b.dtype, (k, pos)
        assert new._gain2 == old._gain2, (k, pos)
        if exact or old._gain2 is not None:
            assert (new.lag, new.removed_db) == (old.lag, old.removed_db), (k, pos)
        pos += n
        k += 1
    return new, old


CASES = [("tone", (320,)), ("buzz", (318,)), ("noise", (640,)), ("tone", SIZES)]


@pytest.mark.parametrize(("kind", "sizes"), CASES)
@pytest.mark.parametrize("echo", [False, True])
def test_bit_for_bit_as_before(
    monkeypatch: pytest.MonkeyPatch, kind: str, sizes: tuple[int, ...], echo: bool
) -> None:
    monkeypatch.setattr(selfecho, "QUIET_RHO", 0.0)  # every search sees an echo: no shortcut
    c, _ = _run(1 + len(kind), kind, echo, sizes)
    if echo and len(sizes) == 1:
        assert c._gain2 is not None  # the echo was found: the fit path was exercised


@pytest.mark.parametrize(("kind", "sizes"), CASES)
@pytest.mark.parametrize("echo", [False, True])
def test_the_same_output_with_fewer_searches(kind: str, sizes: tuple[int, ...], echo: bool) -> None:
    c, old = _run(1 + len(kind), kind, echo, sizes)
    if not echo:  # the failed path ran, with fewer searches (a third of them at 20 ms)
        assert c._gain2 is None and 0 < c.searches < old.searches * (0.7 if sizes[0] > 320 else 0.5)
        assert c.skipped_fits > 0  # and fewer fits: the claim was checked where it was used


def test_a_chunk_longer_than_the_history() -> None:
    rng = np.random.default_rng(5)
    new, old = OwnEchoCanceller(RATE), Oracle(RATE)
    big = (rng.standard_normal(40_000) * 3000).astype(np.int16)
    for c in (new, old):
        c.played(0, big)
    for k, n in enumerate((320, 40_000, 320, 50_000, 640)):
        x = (rng.standard_normal(n) * 3000).astype(np.int16)
        assert np.array_equal(new.clean(x, k * NS), old.clean(x, k * NS))


def _old_fit(seg: np.ndarray, x: np.ndarray, energy: float):
    """The fit as v1 computed it: the design matrix, its GEMM, the residual itself."""
    from tests.sim.selfecho_v1 import _solve

    a = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(seg, x.size)[::-1]).T
    w = _solve(a, x)
    res = x - a @ w
    erle = 10.0 * np.log10(energy / max(float(res @ res), 1e-20))
    return (res, a, float(erle)) if erle >= 10.0 else None, a


@pytest.mark.parametrize("seed", range(3))
def test_the_normal_equations_tell_a_failed_fit_as_the_residual_did(seed: int) -> None:
    """Near the 10 dB line (echo plus user noise at ERLE 10 dB +- a little), with quiet and
    loud references (a large filter: the most rounding), tones and noise: the same
    decisions, the same bits when it passes, and the exact Gram matrix."""
    from rig.sim.selfecho import WINDOW, _fit_segment, _gram

    rng = np.random.default_rng(seed)
    q = 1 / 32768
    for i in range(150):
        t = np.arange(WINDOW + 15)
        if i % 3 == 0:
            ref = np.sin(2 * np.pi * rng.uniform(100, 3000) * t / RATE)
        else:
            ref = rng.standard_normal(t.size)
        ref = np.rint(ref * rng.choice([30.0, 3000.0, 20000.0])) * q
        h = rng.standard_normal(4) * rng.uniform(0.05, 1.5)
        echo = np.convolve(ref, h)[7 : 7 + WINDOW]
        noise = rng.standard_normal(WINDOW)
        snr = 10 ** (rng.uniform(9.0, 11.0) / 10)  # echo over the rest: ERLE close to 10 dB
        noise *= np.sqrt((echo @ echo) / snr / max(noise @ noise, 1e-30))
        x = np.clip(np.rint((echo + noise) / q), -32768, 32767) * q
        energy = float(x @ x)
        got = _fit_segment(ref, x, energy)
        want, a = _old_fit(ref, x, energy)
        assert np.array_equal(_gram(ref, WINDOW), a.T @ a)
        assert (got is None) == (want is None), i
        if got is not None and want is not None:
            assert np.array_equal(got[0], want[0]) and got[2] == want[2]


def _speech(seconds: float, shift: int) -> np.ndarray:
    import soundfile as sf

    files = ("rig/data/turn_what.wav", "rig/data/timing/question.wav", "rig/data/turn_weather.wav")
    x = np.concatenate([sf.read(f, dtype="int16")[0] for f in files])
    return np.roll(np.resize(x, int(seconds * RATE)), shift).astype(np.float64)


@pytest.mark.parametrize(
    ("reply", "echo", "delay_ms", "room", "onset_s"),
    [
        ("speech", 0.0, 0, False, 0.0),
        ("speech", 0.3, 120, False, 0.0),
        ("speech", 0.3, 400, True, 0.0),
        ("tone", 0.0, 0, False, 0.0),
        ("tone", 1.0, 40, True, 0.0),
        ("tone", 0.3, 120, False, 2.9),  # the echo starts while the user talks over it
        ("speech", 0.5, 200, False, 4.1),
    ],
)
def test_real_speech_talking_over_replies_the_same_output(
    reply: str, echo: float, delay_ms: int, room: bool, onset_s: float
) -> None:
    """Where the shortcut is least sure (the user's speech against a spoken reply: the
    best lag of two voices can explain a tenth of a window), in stretches with pauses, and
    an echo that starts late, after searches that found none."""
    rng = np.random.default_rng(delay_ms)
    n_s = 8 * RATE
    t = np.arange(n_s) / RATE
    said = _speech(8, 9000) * 0.7 if reply == "speech" else np.sin(2 * np.pi * 440 * t) * 8000
    said *= np.sin(2 * np.pi * t / 3.1) > -0.4  # replies with gaps
    said = np.rint(said).astype(np.int16)
    user = _speech(8, 0) * (np.sin(2 * np.pi * t / 2.3 + 1) > 0)  # turns with pauses
    d = delay_ms * RATE // 1000
    back = np.concatenate((np.zeros(d), said[: n_s - d] * echo))
    if room:
        back = np.convolve(back, [1.0, 0, 0, 0.4, 0, -0.2, 0.1, 0, 0.05])[:n_s]
    back[: int(onset_s * RATE)] = 0.0
    heard = np.clip(np.rint(user + back + rng.standard_normal(n_s) * 20), -32768, 32767)
    heard = heard.astype(np.int16)
    new, old = _Counted(RATE), Oracle(RATE)
    for k in range(n_s // 320 - 2):
        pos = k * 320
        for c in (new, old):  # said 20 ms ahead of the chunk that meets it
            c.played(pos * NS // RATE, said[pos + 320 : pos + 640])
        pcm = heard[pos : pos + 320]
        hearable = int(np.abs(pcm).max()) > 328
        a = new.clean(pcm, (pos + 320) * NS // RATE, hearable=hearable)
        b = old.clean(pcm, (pos + 320) * NS // RATE, hearable=hearable)
        assert np.array_equal(a, b), k
        assert new._gain2 == old._gain2, k


def test_fft_lengths_are_short_and_fast() -> None:
    from rig.audio.fftlen import fast_len

    for n in range(1, 20_000, 7):
        size = fast_len(n)
        f = size
        for p in (2, 3, 5):
            while f % p == 0:
                f //= p
        assert f == 1 and size >= n
        assert not any(_smooth(m) for m in range(n, size)), n  # the smallest


def _smooth(m: int) -> bool:
    for p in (2, 3, 5):
        while m % p == 0:
            m //= p
    return m == 1


@pytest.mark.parametrize("kind", ["full", "square", "noise", "tone"])
def test_the_coarse_correlation_is_the_exact_one(kind: str) -> None:
    """The search's FFT correlation, rounded to its grid, against integer arithmetic, at
    full scale (the largest rounding an FFT makes here) and the search's own lengths (the
    history's end, and shorter ones early in a reply): the search no longer depends on
    which FFT length, or which FFT, computed it."""
    from rig.sim.selfecho import DECIMATE, WINDOW, _coarse, _decimate

    rng = np.random.default_rng(len(kind))
    for n_r in (RATE + WINDOW, 2 * WINDOW + 4 * 37, WINDOW + 16):
        n = n_r + WINDOW
        if kind == "full":
            s = np.where(rng.random(n) < 0.5, -32768, 32767)
        elif kind == "square":
            s = np.where((np.arange(n) // 37) % 2 == 0, -32768, 32767)
        elif kind == "noise":
            s = np.clip(rng.standard_normal(n) * 12000, -32768, 32767)
        else:
            s = np.sin(2 * np.pi * 440 * np.arange(n) / RATE) * 32767
        s = np.rint(s).astype(np.int64)
        x_i, r_i = s[-WINDOW:], s[:n_r]
        xd_i, rd_i = x_i.reshape(-1, DECIMATE).sum(1), r_i.reshape(-1, DECIMATE).sum(1)
        exact = np.correlate(rd_i, xd_i, "valid")  # [j]: rd_i[j:] against xd_i, integers
        got = _coarse(_decimate(r_i / 32768), _decimate(x_i / 32768))
        units = got[::-1] * 2.0**30  # lag l is exact[sd - wd - l]
        assert np.array_equal(units, np.rint(units)) and np.array_equal(units, exact), n_r
