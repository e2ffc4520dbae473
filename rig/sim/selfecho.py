"""The reference system's own echo canceller: what lets the default `rig sim` ignore its own
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

Cost, per 20 ms chunk (bench/sim_chunk.py; a fleet of 200 streams runs it in one process).
A chunk under the gate only extends the histories (linear int16 buffers; the index of the last
nonzero reference sample says whether a reply is in the window). A loud one while a reply is
there fits at the known lag: a fit that fails is told by the normal equations alone, their
sums exact for these int16-derived signals, so the same decision in the same bits as the
design matrix's (`_fit_segment`). When it fails the lag search runs, mostly three 4608-point
FFTs (`_coarse`: as short as the lags need, rounded to the exact correlation). A search
whose best lag explains under `QUIET_RHO` of the window (no echo: the user talking over the
reply) is not repeated, nor any fit tried, for the next `QUIET_SPAN` input samples while
that window's part still carries half of the energy (`_can_wait`), as long as no echo was
ever found: a failed chunk then passes as it came whatever lag it holds, so the output is
what searching gave. For the same reason, while no echo was ever found, a chunk searches
before it fits at the last lag, and skips that fit when the search sees no echo. Once an
echo was found, the lag a search leaves steers the suppression of `_suppress_only`, so
every such chunk searches as before; only the fit at a lag where the search saw no echo is
skipped.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rig.audio.fftlen import fast_len
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
#: a search whose best lag explains less than this share of the window (normalised
#: correlation squared, coarse) finds no echo: a fit that passes explains 0.65 or more
QUIET_RHO = 0.1
#: ... and no fit is tried until this many input samples later (see `_can_wait`)
QUIET_SPAN = WINDOW // 2
#: (row, column) -> (first sample, delay) of a design Gram entry: column k starts at sample
#: TAPS - 1 - k of the design's segment, so entry (j, k) is the segment's autocorrelation at
#: delay |j - k| from sample TAPS - 1 - max(j, k)
_TAP = np.arange(TAPS)
_G_START = TAPS - 1 - np.maximum.outer(_TAP, _TAP)
_G_DELAY = np.abs(np.subtract.outer(_TAP, _TAP))
_EDGE = np.add.outer(_TAP[:-1], _TAP)  # [s, d] -> s + d, for s < TAPS - 1
_EDGE_CLIP = np.minimum(_EDGE, TAPS - 2)
#: a fit whose residual energy, by the normal equations, exceeds a tenth of the window's by
#: more than this much of the terms' magnitude has failed whatever the rounding (the direct
#: residual, as computed before, agrees to ~1e-14 of them)
_ROUNDING = 1e-9
#: the decimated signals are multiples of 2**-15, so their correlation is one of 2**-30 (and
#: under 2**53 of them): an FFT's result rounded to that grid is the exact correlation
_GRID = float(2**30)


def _f(a: Pcm16) -> F64:
    """int16 samples as the floats the fits work on (k / 32768: exact)."""
    out: F64 = np.multiply(a, 1.0 / 32768.0, dtype=np.float64)
    return out


class _Tail:
    """The last `keep` samples of a stream, in a buffer twice that long: a chunk is written
    in place and the tail moves to the front once per `keep` samples (a concatenation per
    chunk copied the whole 2-second history every 20 ms). Kept as int16, as the samples
    came: a quarter of the memory a float history moved for every chunk of 200 streams,
    while only the rare fit or search reads it (as floats, `_f`: the same values)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._buf = np.zeros(2 * keep, np.int16)
        self._end = 0
        self.size = 0

    def view(self) -> Pcm16:
        return self._buf[self._end - self.size : self._end]

    def grow(self, n: int, *, zero: bool = True) -> Pcm16:
        """The next `n` samples, zeroed (the newest `keep` of them if more), to fill;
        `zero` False leaves them as they were, for a caller that writes every one."""
        if n >= self.keep:
            self._end = self.size = self.keep
            self._buf[: self.keep] = 0
            return self._buf[: self.keep]
        if self._end + n > self._buf.size:
            k = min(self.size, self.keep - n)
            self._buf[:k] = self._buf[self._end - k : self._end]
            self._end = self.size = k
        new = self._buf[self._end : self._end + n]
        if zero:
            new[:] = 0
        self._end += n
        self.size = min(self.size + n, self.keep)
        return new


class OwnEchoCanceller:
    def __init__(self, sample_rate: int, max_lag_s: float = 1.0) -> None:
        self.rate = sample_rate
        self.max_lag = int(max_lag_s * sample_rate)
        self._keep = self.max_lag + WINDOW + TAPS + 8 * sample_rate // 10
        self._out = np.zeros(self._keep + sample_rate, np.int16)  # what was said, by sample
        self._out_end: int | None = None  # absolute sample one past the last said
        self._xh = _Tail(self._keep)  # input history
        self._rh = _Tail(self._keep)  # the reference of the same instants
        self._ref_last: int | None = None  # input sample of the last nonzero reference
        self._received = 0  # input samples so far
        self._offset_ns: int | None = None  # earliest (arrival - sample time) seen
        self._quiet_end: int | None = None  # input samples at a search that found no echo
        self.lag: int | None = None
        self._gain2: float | None = None  # the last good fit's power gain (1 / ERL)
        self.removed_db: float | None = None  # the last fit's echo return loss enhancement

    @property
    def _x(self) -> Pcm16:
        return self._xh.view()

    @property
    def _r(self) -> Pcm16:
        return self._rh.view()

    def _abs(self, t_ns: int) -> int:
        return t_ns * self.rate // NS_PER_S

    def played(self, t_ns: int, pcm: Pcm16) -> None:
        """A reply chunk emitted at `t_ns` (it plays after what was said before it)."""
        start = self._abs(t_ns)
        if self._out_end is not None:
            if start > self._out_end:
                gap = np.zeros(min(start - self._out_end, self._keep), np.int16)
                self._ring_put(self._out_end, gap)
            start = max(start, self._out_end)
        self._ring_put(start, pcm)
        self._out_end = start + pcm.size

    def _ring_put(self, start: int, x: Pcm16) -> None:
        """Sample `start + i` to slot `(start + i) % size`: one or two slices (a chunk longer
        than the ring keeps its end, as the later writes of an index array did)."""
        size = self._out.size
        if x.size > size:
            start, x = start + x.size - size, x[-size:]
        i = start % size
        k = min(x.size, size - i)
        self._out[i : i + k] = x[:k]
        self._out[: x.size - k] = x[k:]

    def _said_into(self, dst: Pcm16, b: int) -> bool:
        """What was said at absolute samples [b - dst.size, b) into `dst` (zeros: nothing);
        False if none of it is in the ring."""
        if self._out_end is None:
            return False
        a, size = b - dst.size, self._out.size
        lo, hi = max(a, self._out_end - size + 1), min(b, self._out_end)
        if hi <= lo:
            return False
        i = lo % size
        k = min(hi - lo, size - i)
        dst[lo - a : lo - a + k] = self._out[i : i + k]
        dst[lo - a + k : hi - a] = self._out[: hi - lo - k]
        return True

    def clean(self, pcm: Pcm16, t_ns: int, *, hearable: bool = True) -> Pcm16:
        """An input chunk that reached the model at `t_ns`, less the system's own echo.

        `hearable` False (the chunk's peak is under the VAD's gate, so it cannot start speech
        whatever is in it) keeps the history and skips the fit and the lag search: a fleet
        of replying streams that paid a search (then ~1.5 ms) on every quiet chunk starved
        the rig's loop (the reference system runs at SCHED_FIFO too)."""
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
        if n < self._keep:
            self._xh.grow(n, zero=False)[:] = pcm
        else:
            self._xh.grow(n)[:] = pcm[-self._keep :]
        ref = self._rh.grow(n)
        if self._said_into(ref, end):
            if ref[-1] != 0:  # most chunks of a reply end in sound
                self._ref_last = self._received - 1
            elif (nz := np.flatnonzero(ref)).size:
                self._ref_last = self._received - ref.size + int(nz[-1])
        need = WINDOW + TAPS
        if not hearable or self._xh.size < need or not self._ref_within(self.max_lag + need):
            return pcm
        fit = self._fit(n)
        if fit is None:
            return self._suppress_only(pcm, _f(pcm))
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

    def _ref_within(self, span: int) -> bool:
        """Whether the reference of the last `span` input samples (of those kept) is not all
        zero: from the index of its last nonzero sample, not a pass over the span."""
        last = self._ref_last
        return last is not None and last >= self._received - min(span, self._rh.size)

    def _suppress_only(self, pcm: Pcm16, x: F64) -> Pcm16:
        """No fit now (the playback's timing jumped, or double talk): a 10 ms block no
        louder than the echo the last good fit predicts from what was said around the lag
        (`SLACK_S` either side, `MARGIN_DB` over it) is taken for echo; louder passes."""
        if self._gain2 is None or self.lag is None:
            return pcm
        n, b, slack = x.size, max(1, self.rate // 100), int(SLACK_S * self.rate)
        ref = self._r
        y = x.copy()
        for i in range(0, n, b):
            blk = x[i : i + b]
            hi = ref.size - (n - i) - self.lag + slack
            lo = max(0, hi - 2 * slack - b)
            if hi <= lo:
                continue
            # the loudest b samples said around the lag: a moving sum of squares, by a
            # cumulative sum (exact for these signals: the bits a convolution gave)
            seg = _f(ref[lo:hi])
            best = 0.0
            if seg.size >= b:
                cs = np.cumsum(seg**2)
                best = float(np.max(cs[b - 1 :] - np.concatenate(([0.0], cs[:-b]))))
            if float(blk @ blk) <= self._gain2 * best * 10 ** (MARGIN_DB / 10):
                y[i : i + b] = 0.0
        return np.asarray(np.clip(np.rint(y * 32768.0), -32768, 32767), dtype=np.int16)

    def _fit(self, n: int) -> tuple[F64, F64] | None:
        x = _f(self._x[-WINDOW:])
        energy = float(x @ x)
        if energy <= 1e-12:
            return None
        if self._gain2 is None and self._can_wait():
            # no fit can pass, and with no echo ever found a failed chunk passes as it came,
            # whatever the lag: the search can wait
            self.removed_db = None
            return None
        found: tuple[int | None, bool] | None = None
        if self._gain2 is None and self.lag is not None:
            # no echo ever found: search first. Where no lag explains QUIET_RHO of the
            # window, no fit can pass, not even at the last lag (what `_can_wait` relies on
            # too), so the fit there, which failed before this same search, is skipped;
            # otherwise all goes as before, with this search's result
            found = self._search()
            lag, seen = found
            if lag is not None and not seen:
                if lag != self.lag:
                    self.lag = lag
                    self.removed_db = None
                return None
        for search in (False, True):
            if search or self.lag is None:
                lag, seen = self._search() if found is None else found
                if lag is None or (search and lag == self.lag):  # the fit there just failed
                    return None
                self.lag = lag
                if not seen:  # no lag explains QUIET_RHO of the window: no fit can pass
                    break
            got = self._fit_at(self.lag, x, energy)
            if got is not None:
                res, a, erle = got
                self._quiet_end = None
                self.removed_db = erle
                est = x - res
                ref = a[:, TAPS // 2]
                self._gain2 = float(est @ est) / max(float(ref @ ref), 1e-20)
                return (res[-n:].copy(), est[-n:]) if n <= WINDOW else None
            if search:
                break
        self.removed_db = None
        return None

    def _can_wait(self) -> bool:
        """Whether no fit can pass yet, by what a search a moment ago found: no lag that
        explained `QUIET_RHO` of its window. The part of that window still in this one (at
        least `WINDOW - QUIET_SPAN` samples) must carry no less energy than the samples come
        since and than those it dropped. A fit passes only if the echo explains 90 % of the
        window, so most of that shared part, which would then have shown at its lag in that
        search with a share of about 0.2 or more (where fits pass, 0.65 or more: a margin
        the tests/sim/test_selfecho_same.py sequences check against the old canceller).
        The user talking over a tone reply then costs a search per `QUIET_SPAN` samples,
        not a search and two fits per chunk; an echo that starts in a quieter window makes
        the new samples dominate and is searched for at once."""
        if self._quiet_end is None:
            return False
        a = self._received - self._quiet_end
        hist = self._x
        if not 0 < a <= QUIET_SPAN or hist.size < WINDOW + a:
            return False
        shared = _f(hist[-WINDOW:-a])
        kept = float(shared @ shared)
        new, dropped = _f(hist[-a:]), _f(hist[-WINDOW - a : -WINDOW])
        return float(new @ new) <= kept and float(dropped @ dropped) <= kept

    def _fit_at(self, lag: int, x: F64, energy: float) -> tuple[F64, F64, float] | None:
        return _fit_segment(self._segment(lag, WINDOW), x, energy)

    def _segment(self, lag: int, w: int) -> F64:
        """The reference the design at `lag` is made of: the `w + TAPS - 1` samples ending
        `lag - TAPS/2` before the input's end (zeros before the reference's history)."""
        d0 = lag - TAPS // 2  # the smallest delay (column 0); the search keeps it >= 0
        need = w + TAPS - 1
        ref = self._r
        hi = max(0, ref.size - d0)
        seg = _f(ref[max(0, hi - need) : hi])
        if seg.size < need:
            seg = np.concatenate((np.zeros(need - seg.size), seg))
        return seg

    def _search(self) -> tuple[int | None, bool]:
        """The lag where the reference best explains the input (normalised correlation):
        coarse on both signals summed in blocks of `DECIMATE` (an FFT a sixteenth the size
        of a full-rate one: the search runs on every hearable chunk while a reply plays),
        then exact at full rate around the coarse peak. Sums of squares and products of
        these signals are exact, so strided adds, slices and `np.correlate` give the bits
        the reshapes, index arrays and per-lag dot products did."""
        ref = self._r
        span = min(self.max_lag + WINDOW, ref.size)
        span -= span % DECIMATE
        if span - WINDOW < TAPS // 2:
            return None, False
        x, r = _f(self._x[-WINDOW:]), _f(ref[ref.size - span :])
        xd, rd = _decimate(x), _decimate(r)
        wd, sd = xd.size, rd.size
        cl = _coarse(rd, xd)
        # lag l (0 .. sd - wd): the reference's energy over its blocks sd - wd - l .. sd - l
        k = sd - wd
        cs = np.cumsum(np.concatenate(([0.0], rd * rd)))
        e = cs[wd:][::-1] - cs[: k + 1][::-1]
        score = np.abs(cl) / np.sqrt(np.maximum(e, 1e-12))
        peak = int(np.argmax(score))
        seen = float(score[peak]) ** 2 >= QUIET_RHO * float(xd @ xd)
        self._quiet_end = None if seen else self._received
        coarse = peak * DECIMATE
        # exact around it: x[i] against r[span - WINDOW - m + i], m from lo to hi
        lo, hi = max(TAPS // 2, coarse - DECIMATE), min(span - WINDOW, coarse + DECIMATE)
        if hi < lo:
            return None, seen
        sub = r[span - WINDOW - hi : span - lo]
        dots = np.correlate(sub, x, "valid")[::-1]  # lag lo + j
        c2 = np.cumsum(np.concatenate(([0.0], sub * sub)))
        em = (c2[WINDOW:] - c2[: hi - lo + 1])[::-1]
        ok = em > 1e-9
        if not ok.any():
            return None, seen
        sc = np.where(ok, np.abs(dots) / np.sqrt(np.where(ok, em, 1.0)), -1.0)
        return lo + int(np.argmax(sc)), seen


def _fit_segment(seg: F64, x: F64, energy: float) -> tuple[F64, F64, float] | None:
    """The residual, design and ERLE of the least-squares fit of `x` by the design made of
    `seg`, if it removes `MIN_ERLE_DB`. A fit that plainly fails is told by the normal
    equations alone: the Gram matrix and the correlations are exact (integer multiples of
    2**-30: any order of summation gives the bits of a.T @ a), so the filter is the one the
    design matrix gives, without building it (a copy and a GEMM: most of a failed fit's
    cost); only a fit that may pass is checked on the residual itself, as before."""
    ata = _gram(seg, x.size)
    atx = np.ascontiguousarray(np.correlate(seg, x, "valid")[::-1])
    # a tiny ridge: the same residual as an SVD solve for these fits (a tone's shifted
    # copies are nearly collinear; the ridge picks the small-norm filter)
    ridge = 1e-9 * (float(np.trace(ata)) / TAPS + 1e-12)
    h = np.asarray(np.linalg.solve(ata + ridge * np.eye(TAPS), atx), dtype=np.float64)
    left = energy - 2.0 * float(h @ atx) + float(h @ (ata @ h))  # ||x - a h||^2
    ah = np.abs(h)
    slack = _ROUNDING * (energy + 2.0 * float(ah @ np.abs(atx)) + float(ah @ (np.abs(ata) @ ah)))
    if left - slack > energy / 10 ** (MIN_ERLE_DB / 10):
        return None
    a = _design(seg, x.size)
    res = x - a @ h
    erle = 10.0 * np.log10(energy / max(float(res @ res), 1e-20))
    return (res, a, float(erle)) if erle >= MIN_ERLE_DB else None


def _coarse(rd: F64, xd: F64) -> F64:
    """The correlation of `xd` with the blocks of `rd` it would meet at lags 0 .. sd - wd
    (lag l: `rd[sd - wd - l :][: wd]`), exact. By an FFT no longer than `rd` (the lags
    wanted are those no wrap-around reaches), rounded to the grid these signals' products
    lie on, so no FFT's rounding picks among lags that tie (a periodic reply)."""
    wd, sd = xd.size, rd.size
    size = fast_len(sd)  # as short as the valid lags allow
    c = np.fft.irfft(np.fft.rfft(rd, size).conj() * np.fft.rfft(xd, size), size)
    k = sd - wd  # lag l is c[(l - k) % size]
    cl = np.concatenate((c[size - k :], c[:1]))
    out: F64 = np.rint(cl * _GRID) / _GRID
    return out


def _decimate(x: F64) -> F64:
    """Sums of `DECIMATE` consecutive samples (exact for these signals, in any order)."""
    out = x[0::DECIMATE].copy()
    for k in range(1, DECIMATE):
        out += x[k::DECIMATE]
    return out


def _gram(seg: F64, w: int) -> F64:
    """a.T @ a of the design made of `seg` (column k: seg[TAPS-1-k : TAPS-1-k+w]), from the
    segment's autocorrelation over its first w samples and the edge terms: p[s, d] is the
    sum of seg[s + i] * seg[s + d + i] over i < w (index arrays, not sliding-window views:
    those cost more than the arithmetic here)."""
    p0 = np.correlate(seg[: w + TAPS - 1], seg[:w], "valid")  # s = 0, d = 0 .. TAPS - 1
    # from s to s + 1: less seg[s] * seg[s + d], plus seg[s + w] * seg[s + w + d] (entries
    # with s + d past TAPS - 2 are never read: clipped, to stay inside the segment)
    step = seg[w:][_EDGE_CLIP] * seg[w : w + TAPS - 1, None] - seg[_EDGE] * seg[: TAPS - 1, None]
    p = np.empty((TAPS, TAPS))
    p[0] = p0
    p[1:] = p0 + np.cumsum(step, axis=0)
    gram: F64 = p[_G_START, _G_DELAY]
    return gram


def _design(seg: F64, w: int) -> F64:
    """Columns: the reference delayed by lag - TAPS/2 + k, over the last `w` samples: one
    strided view of the segment, copied once."""
    # row j of the view is seg[j : j + w]; column k (delay d0 + k) is row TAPS - 1 - k
    rows = np.lib.stride_tricks.sliding_window_view(seg, w)[::-1]
    return np.ascontiguousarray(rows).T  # (w, TAPS), Fortran order: a.T @ a is one GEMM
