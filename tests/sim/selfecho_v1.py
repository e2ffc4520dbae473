"""The test oracle: rig.sim.selfecho as it was before its ring buffers and fit shortcuts
(commit ba597e3), kept verbatim below this paragraph so tests/sim/test_selfecho_same.py can
compare the two bit for bit. Not used by rig. One change since: the lag search's coarse
correlation is rounded to its exact value (multiples of 2**-30), as rig's now is. An FFT's
rounding had picked among lags whose correlations tie exactly (a periodic reply), so the
pick depended on the FFT's length; rig's search now takes a shorter one.

The reference system's own echo canceller: what lets the default `rig sim` ignore its own
reply when the rig feeds it back (rig run --echo), so that self-interruption has ground truth
both ways (`rig sim --self-echo-sensitive` turns it off: its VAD then hears the echo).

How this works (sans-I/O, times as arguments). The system knows exactly what it said: the
shell hands every reply chunk to it as it leaves (`played`, at max(send time, end of the
previous chunk), as a listener's queue plays it). Each input chunk gets the reference of the
instants just before it arrived (`clean`; input sample i sits at the lower envelope of
arrival - i / rate, so one late chunk does not move it), so the echo in the input is that
reference delayed by a round trip L (network, the rig's playback, the echo condition's delay)
and filtered (attenuation, resampling, the first milliseconds of a room). L is found by
cross-correlating the last `WINDOW` input samples with the reference over lags up to
`max_lag_s` (an FFT); a filter of `TAPS` taps around it is fitted by least squares on the
same window and subtracted. The fit is used only if it removes at least `MIN_ERLE_DB` of the
window's energy (an echo is there); then a 10 ms block of what is left that lies
`SUPPRESS_DB` below the echo it explains is dropped too (residual echo suppression, as real
cancellers do: the playback's gaps move a little with the network). Otherwise the input
passes unchanged: no reply playing, or the user talking over it (a fit to uncorrelated audio
removes little, so double talk still reaches the VAD), except that while a fit that worked
before fails (the playback's timing jumped under load), a 10 ms block no louder than the
echo the last good fit predicts (`MARGIN_DB` over it, `SLACK_S` of timing either side) is
taken for echo. The lag is kept once found and searched again when the fit stops working.

Limits (docs/reference-system.md): a pure delay and gain is removed to well below the VAD's
gate; a room longer than `TAPS` samples leaves its reverberant tail, which a loud enough echo
can still push over the gate.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.clock.base import NS_PER_S

F64 = npt.NDArray[np.float64]
WINDOW = 2048
TAPS = 16
MIN_ERLE_DB = 10.0
SUPPRESS_DB = 6.0
SLACK_S = 0.04
MARGIN_DB = 3.0
DECIMATE = 4  # the coarse lag search sums blocks of this many samples


class OwnEchoCanceller:
    def __init__(self, sample_rate: int, max_lag_s: float = 1.0) -> None:
        self.rate = sample_rate
        self.max_lag = int(max_lag_s * sample_rate)
        self._keep = self.max_lag + WINDOW + TAPS + 8 * sample_rate // 10
        self._out = np.zeros(self._keep + sample_rate)  # ring of what was said, by sample
        self._out_end: int | None = None  # absolute sample one past the last said
        self._x = np.zeros(0)  # input history
        self._r = np.zeros(0)  # the reference of the same instants
        self._received = 0  # input samples so far
        self._offset_ns: int | None = None  # earliest (arrival - sample time) seen
        self.lag: int | None = None
        self._gain2: float | None = None  # the last good fit's power gain (1 / ERL)
        self.removed_db: float | None = None  # the last fit's echo return loss enhancement

    def _abs(self, t_ns: int) -> int:
        return t_ns * self.rate // NS_PER_S

    def played(self, t_ns: int, pcm: Pcm16) -> None:
        """A reply chunk emitted at `t_ns` (it plays after what was said before it)."""
        start = self._abs(t_ns)
        if self._out_end is not None:
            if start > self._out_end:
                self._ring_put(self._out_end, np.zeros(min(start - self._out_end, self._keep)))
            start = max(start, self._out_end)
        x = pcm.astype(np.float64) / 32768.0
        self._ring_put(start, x)
        self._out_end = start + x.size

    def _ring_put(self, start: int, x: F64) -> None:
        n = self._out.size
        idx = np.arange(start, start + x.size) % n
        self._out[idx] = x

    def _said(self, a: int, b: int) -> F64:
        out = np.zeros(b - a)
        if self._out_end is None:
            return out
        lo, hi = max(a, self._out_end - self._out.size + 1), min(b, self._out_end)
        if hi > lo:
            out[lo - a : hi - a] = self._out[np.arange(lo, hi) % self._out.size]
        return out

    def clean(self, pcm: Pcm16, t_ns: int, *, hearable: bool = True) -> Pcm16:
        """An input chunk that reached the model at `t_ns`, less the system's own echo.

        `hearable` False (the chunk's peak is under the VAD's gate, so it cannot start speech
        whatever is in it) keeps the history and skips the fit and the lag search: a search
        costs ~1.5 ms per chunk, and a fleet of replying streams that paid it on every quiet
        chunk starved the rig's loop (the reference system runs at SCHED_FIFO too)."""
        n = pcm.size
        # input sample i sits at offset + i / rate: the earliest arrival seen (the lower
        # envelope), so a chunk that arrives late does not shift the reference it meets
        s = self._received
        self._received += n
        cand = t_ns - s * NS_PER_S // self.rate
        if self._offset_ns is None or cand < self._offset_ns:
            self._offset_ns = cand
        # the chunk's samples end where it starts on that line: what was said before it
        # arrived (a frame sent at its start carries audio the system has not said yet)
        end = self._abs(self._offset_ns) + s
        x = pcm.astype(np.float64) / 32768.0
        self._x = np.concatenate((self._x, x))[-self._keep :]
        self._r = np.concatenate((self._r, self._said(end - n, end)))[-self._keep :]
        need = WINDOW + TAPS
        if not hearable or self._x.size < need or not self._r[-(self.max_lag + need) :].any():
            return pcm
        fit = self._fit(n)
        if fit is None:
            return self._suppress_only(pcm, x)
        y, est = fit
        # residual echo suppression: a 10 ms block whose residual is SUPPRESS_DB below the
        # echo it explains is echo that the fit missed (a gap edge of the playback moved by
        # the network), not the user
        b = max(1, self.rate // 100)
        for i in range(0, n, b):
            r, e = y[i : i + b], est[i : i + b]
            if float(r @ r) * 10 ** (SUPPRESS_DB / 10) < float(e @ e):
                y[i : i + b] = 0.0
        return np.asarray(np.clip(np.rint(y * 32768.0), -32768, 32767), dtype=np.int16)

    def _suppress_only(self, pcm: Pcm16, x: F64) -> Pcm16:
        """No fit now (the playback's timing jumped, or double talk): a 10 ms block no
        louder than the echo the last good fit predicts from what was said around the lag
        (`SLACK_S` either side, `MARGIN_DB` over it) is taken for echo; louder passes."""
        if self._gain2 is None or self.lag is None:
            return pcm
        n, b, slack = x.size, max(1, self.rate // 100), int(SLACK_S * self.rate)
        r2 = self._r * self._r
        y = x.copy()
        for i in range(0, n, b):
            blk = x[i : i + b]
            hi = self._r.size - (n - i) - self.lag + slack
            lo = max(0, hi - 2 * slack - b)
            if hi <= lo:
                continue
            seg = r2[lo:hi]
            best = float(np.max(np.convolve(seg, np.ones(b), "valid"))) if seg.size >= b else 0.0
            if float(blk @ blk) <= self._gain2 * best * 10 ** (MARGIN_DB / 10):
                y[i : i + b] = 0.0
        return np.asarray(np.clip(np.rint(y * 32768.0), -32768, 32767), dtype=np.int16)

    def _fit(self, n: int) -> tuple[F64, F64] | None:
        x = self._x[-WINDOW:]
        energy = float(x @ x)
        if energy <= 1e-12:
            return None
        for search in (False, True):
            if search or self.lag is None:
                lag = self._search()
                if lag is None or (search and lag == self.lag):  # the fit there just failed
                    return None
                self.lag = lag
            a = self._design(self.lag, WINDOW)
            res = x - a @ _solve(a, x)
            erle = 10.0 * np.log10(energy / max(float(res @ res), 1e-20))
            if erle >= MIN_ERLE_DB:
                self.removed_db = float(erle)
                est = x - res
                ref = a[:, TAPS // 2]
                self._gain2 = float(est @ est) / max(float(ref @ ref), 1e-20)
                return (res[-n:].copy(), est[-n:]) if n <= WINDOW else None
            if search:
                break
        self.removed_db = None
        return None

    def _design(self, lag: int, w: int) -> F64:
        """Columns: the reference delayed by lag - TAPS/2 + k, over the last `w` samples
        (zeros before the reference's history starts): one strided view, copied once."""
        d0 = lag - TAPS // 2  # the smallest delay (column 0); the search keeps it >= 0
        need = w + TAPS - 1
        hi = max(0, self._r.size - d0)
        seg = self._r[max(0, hi - need) : hi]
        if seg.size < need:
            seg = np.concatenate((np.zeros(need - seg.size), seg))
        # row j of the view is seg[j : j + w]; column k (delay d0 + k) is row TAPS - 1 - k
        rows = np.lib.stride_tricks.sliding_window_view(seg, w)[::-1]
        return np.ascontiguousarray(rows).T  # (w, TAPS), Fortran order: a.T @ a is one GEMM

    def _search(self) -> int | None:
        """The lag where the reference best explains the input (normalised correlation):
        coarse on both signals summed in blocks of `DECIMATE` (an FFT a sixteenth the size
        of a full-rate one: the search runs on every hearable chunk while a reply plays),
        then exact at full rate around the coarse peak."""
        x = self._x[-WINDOW:]
        span = min(self.max_lag + WINDOW, self._r.size)
        span -= span % DECIMATE
        r = self._r[-span:]
        if span - WINDOW < TAPS // 2:
            return None
        xd = x.reshape(-1, DECIMATE).sum(axis=1)
        rd = r.reshape(-1, DECIMATE).sum(axis=1)
        wd, sd = xd.size, rd.size
        size = 1 << int(np.ceil(np.log2(sd + wd)))
        c = np.fft.irfft(np.fft.rfft(rd, size).conj() * np.fft.rfft(xd, size), size)
        c = np.rint(c * 2.0**30) / 2.0**30  # (added since ba597e3: see the docstring)
        lags_d = np.arange(0, sd - wd + 1)
        cs = np.cumsum(np.concatenate(([0.0], rd * rd)))
        starts = sd - wd - lags_d
        e = cs[starts + wd] - cs[starts]
        score = np.abs(c[(lags_d - sd + wd) % size]) / np.sqrt(np.maximum(e, 1e-12))
        coarse = int(lags_d[int(np.argmax(score))]) * DECIMATE
        # exact around it: x[i] against r[span - WINDOW - m + i]
        best, best_lag = -1.0, None
        for m in range(
            max(TAPS // 2, coarse - DECIMATE), min(span - WINDOW, coarse + DECIMATE) + 1
        ):
            seg = r[span - WINDOW - m : span - m]
            em = float(seg @ seg)
            if em <= 1e-9:
                continue
            sc = abs(float(x @ seg)) / np.sqrt(em)
            if sc > best:
                best, best_lag = sc, m
        return best_lag


def _solve(a: F64, x: F64) -> F64:
    """Least squares by the normal equations (TAPS x TAPS) with a tiny ridge: the same
    residual as an SVD solve for these fits (a tone's shifted copies are nearly collinear;
    the ridge picks the small-norm filter), at a tenth of the cost."""
    ata = a.T @ a
    ridge = 1e-9 * (float(np.trace(ata)) / TAPS + 1e-12)
    return np.asarray(np.linalg.solve(ata + ridge * np.eye(TAPS), a.T @ x), dtype=np.float64)
