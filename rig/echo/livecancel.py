"""The rig's own echo removed from a sound card's capture as it arrives, frame by frame.

Why: over a sound card in a room the rig's microphone hears its own loudspeaker (the user
track) as well as the device under test; onsets, latencies and yields measured on that
capture fire on the user's own speech. Cleaning the capture on the capture path, before the
listener sees it, means the live listener and director hear what the analysis measures.

How this works (sans-I/O: the device transport feeds it, rig.transports.device). The
transport hands over every output block as it plays (`played(out_frame, pcm)`, silence where
the queue was dry) and every input block as it arrives (`captured(in_frame, pcm)`). Input
frame j holds the rig's own echo of output frame `j - lag` onwards, where `lag` is the bulk
delay the calibration measured (rig.device.response: `t0_ms`, the direct path less a margin)
turned into a frame offset between the two streams once at the start (`align`). Each full
`frame` of capture whose reference has played goes through SpeexDSP's MDF canceller (the
`aec` extra) with that reference; what comes out is cleaned capture in frames, a little after
the raw (at most one frame plus whatever of the reference has not played yet). The filter is
seeded from the measured response: before the stream, `pretrain` runs it on seeded noise and
that noise through the response, so it starts converged instead of adapting for a second.

Residual echo suppression (as real cancellers do after their filter): a cleaned frame more
than `SUPPRESS_DB` below the echo the response predicts for it holds nothing but what the
filter left of the rig's own echo, and is silenced (the price: a device talking that much
below the rig's echo at that moment is silenced with it).

ERLE (echo return loss enhancement, the filter's: before suppression) is measured on
echo-only frames: the reference is
playing and the capture is no louder than `double_talk_db` above the echo the response
predicts (louder: the device is talking too). The verdict (`OwnEchoVerdict`) flags a rollout
whose residual echo is too high to tell the device from the rig: where the residual's peak
on echo-only frames reaches the onset threshold, an onset can fire on the rig's own echo;
and one whose ERLE is under `MIN_ERLE_DB` while the raw echo was above that threshold.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.extras import MissingExtra

F64 = npt.NDArray[np.float64]
#: how far back the reference ring reaches beyond the bulk delay and the tail
KEEP_S = 2.0
MIN_ERLE_DB = 10.0
#: residual echo suppression: how far below the predicted echo a cleaned frame is taken
#: for residual echo only
SUPPRESS_DB = 25.0


def frame_samples(rate: int) -> int:
    """The canceller's frame: the power of two nearest 5 ms (256 at 48 kHz: one JACK period)."""
    return 1 << max(4, round(math.log2(rate / 200)))


@dataclass(frozen=True, slots=True)
class OwnEchoVerdict:
    erle_db: float | None  # the filter's, median over echo-only frames (None: no echo)
    erle_frames: int
    raw_echo_peak_dbfs: float | None  # p95 of the raw capture's peak on echo-only frames
    residual_peak_dbfs: float | None  # p95 of the cleaned capture's peak there (as heard)
    flagged: bool
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 2)

        return {
            "erle_db": r(self.erle_db),
            "erle_frames": self.erle_frames,
            "raw_echo_peak_dbfs": r(self.raw_echo_peak_dbfs),
            "residual_peak_dbfs": r(self.residual_peak_dbfs),
            "flagged": self.flagged,
            "reason": self.reason,
        }


class CaptureCanceller:
    """SpeexDSP's MDF canceller between a sound card's output and its input."""

    def __init__(
        self,
        rate: int,
        tail_samples: int,
        echo_gain: float,
        *,
        frame: int | None = None,
        double_talk_db: float = 6.0,
        suppress_db: float | None = SUPPRESS_DB,
    ) -> None:
        try:
            import speexdsp
        except ModuleNotFoundError as exc:
            raise MissingExtra("aec", "--cancel-own-echo", exc.name) from None
        self.rate = rate
        self.frame = frame or frame_samples(rate)
        self.tail = max(self.frame, tail_samples)
        self.echo_gain = echo_gain  # the path's power gain (sum of the response's taps squared)
        self.double_talk = 10 ** (double_talk_db / 10)
        #: residual echo suppression: a cleaned frame this far below the echo the response
        #: predicts is residual echo only, and is silenced (None: off)
        self.suppress = None if suppress_db is None else 10 ** (-suppress_db / 10)
        self.suppressed = 0
        self._ec = speexdsp.EchoCanceller.create(self.frame, self.tail, rate)
        self.lag: int | None = None  # out frame = in frame - lag
        self._ring = np.zeros(self.tail + round(KEEP_S * rate), np.int16)
        self._out_end: int | None = None  # output frames known up to here (exclusive)
        self._pend = np.zeros(0, np.int16)
        self._pend_frame = 0
        self.frames = 0
        self.cost_ns = 0
        self._stats: list[tuple[float, float, float, float]] = []  # x, y energies; peaks

    # --- set-up -------------------------------------------------------------------------

    def align(self, lag_frames: int) -> None:
        """Input frame j hears output frame j - lag first (the bulk delay, in frames)."""
        self.lag = lag_frames

    def pretrain(self, taps: F64, seconds: float = 1.5, seed: int = 31) -> None:
        """Run the filter on seeded noise and its echo through `taps` (tap 0 at the bulk
        delay): it starts from the measured room instead of from nothing."""
        rng = np.random.default_rng(seed)
        n = (round(seconds * self.rate) // self.frame) * self.frame
        far = rng.standard_normal(n) * 3000.0
        near = np.convolve(far, taps)[:n]
        far16 = np.clip(np.rint(far), -32768, 32767).astype(np.int16)
        near16 = np.clip(np.rint(near), -32768, 32767).astype(np.int16)
        for a in range(0, n, self.frame):
            self._ec.process(
                near16[a : a + self.frame].tobytes(), far16[a : a + self.frame].tobytes()
            )

    # --- the stream ---------------------------------------------------------------------

    def played(self, out_frame: int, pcm: Pcm16) -> None:
        """Output frames `out_frame...` played `pcm` (zeros where nothing was queued)."""
        n = self._ring.size
        if self._out_end is not None and out_frame > self._out_end:  # a gap: silence
            self._write(self._out_end, np.zeros(min(out_frame - self._out_end, n), np.int16))
        self._write(out_frame, pcm[-n:] if pcm.size > n else pcm)
        self._out_end = max(self._out_end or 0, out_frame + pcm.size)

    def _write(self, start: int, pcm: Pcm16) -> None:
        n = self._ring.size
        idx = (start + np.arange(pcm.size)) % n
        self._ring[idx] = pcm

    def _reference(self, out_start: int, count: int) -> Pcm16:
        if self._out_end is None or out_start + count <= self._out_end - self._ring.size:
            return np.zeros(count, np.int16)
        idx = (out_start + np.arange(count)) % self._ring.size
        ref = self._ring[idx].copy()
        ref[np.arange(out_start, out_start + count) < self._out_end - self._ring.size] = 0
        return ref

    def captured(self, in_frame: int, pcm: Pcm16) -> list[tuple[int, Pcm16, Pcm16]]:
        """Raw capture in; (in_frame, cleaned, raw) for every frame that can be done now."""
        assert self.lag is not None, "align() first"
        if self._pend.size == 0:
            self._pend_frame = in_frame
        elif in_frame != self._pend_frame + self._pend.size:  # a gap in the input: restart
            self._pend = np.zeros(0, np.int16)
            self._pend_frame = in_frame
        self._pend = np.concatenate([self._pend, pcm])
        return self.ready()

    def ready(self) -> list[tuple[int, Pcm16, Pcm16]]:
        """The pending frames whose reference has played."""
        assert self.lag is not None
        out: list[tuple[int, Pcm16, Pcm16]] = []
        f = self.frame
        while self._pend.size >= f:
            ref_start = self._pend_frame - self.lag
            if self._out_end is None or ref_start + f > self._out_end:
                break  # the reference for this frame has not played yet
            t = time.thread_time_ns()
            raw = self._pend[:f]
            ref = self._reference(ref_start, f)
            clean = np.frombuffer(self._ec.process(raw.tobytes(), ref.tobytes()), np.int16)
            heard = self._suppress(clean, ref)
            self._note(raw, clean, heard, ref)
            clean = heard
            self.cost_ns += time.thread_time_ns() - t
            self.frames += 1
            out.append((self._pend_frame, clean, raw))
            self._pend = self._pend[f:]
            self._pend_frame += f
        return out

    def _suppress(self, clean: Pcm16, ref: Pcm16) -> Pcm16:
        if self.suppress is None:
            return clean
        r, y = ref.astype(np.float64), clean.astype(np.float64)
        expected = float(r @ r) * self.echo_gain
        if expected / r.size < 1.0 or float(y @ y) > expected * self.suppress:
            return clean  # no echo to speak of, or more than residual echo: the device
        self.suppressed += 1
        return np.zeros_like(clean)

    def _note(self, raw: Pcm16, clean: Pcm16, heard: Pcm16, ref: Pcm16) -> None:
        r = ref.astype(np.float64)
        x = raw.astype(np.float64)
        er, ex = float(r @ r), float(x @ x)
        expected = er * self.echo_gain
        if er / r.size < 100.0 or expected / r.size < 1.0 or ex > self.double_talk * expected:
            return  # the rig was silent, its echo is below one LSB, or the device talks too
        y = clean.astype(np.float64)
        peak = float(np.abs(heard.astype(np.float64)).max())
        self._stats.append((ex, float(y @ y), float(np.abs(x).max()), peak))

    # --- the account --------------------------------------------------------------------

    def verdict(self, onset_threshold_dbfs: float) -> OwnEchoVerdict:
        """ERLE and whether the residual echo can pass for the device (see the docstring)."""
        s = self._stats
        if not s:
            return OwnEchoVerdict(None, 0, None, None, False, None)
        a = np.asarray(s, dtype=np.float64)
        erle = float(np.median(10 * np.log10(np.maximum(a[:, 0], 1.0) / np.maximum(a[:, 1], 1.0))))

        def p95_dbfs(col: F64) -> float:
            return 20 * math.log10(max(float(np.percentile(col, 95)), 1.0) / 32768.0)

        raw_pk, res_pk = p95_dbfs(a[:, 2]), p95_dbfs(a[:, 3])
        reason = None
        if erle < MIN_ERLE_DB and raw_pk >= onset_threshold_dbfs:
            reason = (
                f"echo return loss enhancement {erle:.1f} dB < {MIN_ERLE_DB:g} dB over "
                f"{len(s)} echo-only frames (the canceller did not hold the rig's own echo)"
            )
        elif res_pk >= onset_threshold_dbfs:
            reason = (
                f"residual own echo peaks at {res_pk:.1f} dBFS (p95 of {len(s)} echo-only "
                f"frames; ERLE {erle:.1f} dB), at or above the onset threshold "
                f"{onset_threshold_dbfs:g} dBFS: the device cannot be told from the rig"
            )
        return OwnEchoVerdict(erle, len(s), raw_pk, res_pk, reason is not None, reason)

    def describe(self) -> dict[str, Any]:
        return {
            "method": "speexdsp mdf, seeded from the calibrated response",
            "frame": self.frame,
            "tail_ms": round(self.tail * 1000.0 / self.rate, 3),
            "lag_frames": self.lag,
            "frames": self.frames,
            "cost_us_per_frame": round(self.cost_ns / 1000.0 / max(1, self.frames), 2),
            "suppress_db": None if self.suppress is None else SUPPRESS_DB,
            "suppressed_frames": self.suppressed,
            "min_erle_db": MIN_ERLE_DB,
        }
