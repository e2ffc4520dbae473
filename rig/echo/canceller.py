"""The rig's own echo removed from a sound card's capture: SpeexDSP's adaptive canceller (the
`aec` extra) over a finished rollout's tracks.

Why: a device under test in a room with the rig has a microphone that hears the rig's own
playback (the user track) as well as the device; onsets on the raw capture then fire on the
user's own speech. Speex's multi-delay block frequency-domain adaptive filter (MDF) removes
what is linearly explained by the reference; what the device says passes.

How this works (a pure function of two arrays, run after the stream, never on the audio
loop): `cancel_own_echo(capture, reference, rate, bulk_delay)` delays the reference by the
path's known bulk delay (the calibrated round trip, less a margin), so the filter's
`tail_ms` only has to cover the room, then feeds both through
`speexdsp.EchoCanceller.process` frame by frame. ERLE (echo return loss enhancement) is
measured per frame where the reference is playing and the capture holds mostly echo
(`echo_only`: the frames a caller knows to be free of the device), as the median of
10*log10(capture energy / cleaned energy); a rollout below `min_erle_db` is flagged: its
residual echo is too high to tell the device from the rig.

Limits: the canceller adapts (its first ~0.5-1 s leave more echo); double talk slows it;
nothing non-linear is removed (no residual echo suppressor in this binding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.extras import MissingExtra

F64 = npt.NDArray[np.float64]
FRAME_MS = 10.0
TAIL_MS = 100.0
MIN_ERLE_DB = 10.0


@dataclass(frozen=True, slots=True)
class Cancelled:
    cleaned: Pcm16
    erle_db: float | None  # median over echo-only frames (None: none to measure)
    erle_frames: int
    flagged: bool  # residual echo too high: the device cannot be told from the rig

    def describe(self) -> dict[str, Any]:
        return {
            "method": "speexdsp mdf",
            "erle_db": None if self.erle_db is None else round(self.erle_db, 2),
            "erle_frames": self.erle_frames,
            "flagged": self.flagged,
            "min_erle_db": MIN_ERLE_DB,
        }


def cancel_own_echo(
    capture: Pcm16,
    reference: Pcm16,
    sample_rate: int,
    bulk_delay: int,
    *,
    echo_only: Sequence[tuple[int, int]] | None = None,
    tail_ms: float = TAIL_MS,
) -> Cancelled:
    """`capture` less what `reference` (the rig's own playback, same timeline and rate)
    explains through the room; `bulk_delay` samples of the path are taken out first."""
    try:
        import speexdsp
    except ModuleNotFoundError as exc:
        raise MissingExtra("aec", "--cancel-own-echo", exc.name) from None
    frame = max(1, round(sample_rate * FRAME_MS / 1000))
    n = capture.size
    ref = np.zeros(n, np.int16)
    shift = max(0, bulk_delay)
    src = reference[: max(0, n - shift)]
    ref[shift : shift + src.size] = src
    filt = max(frame, round(sample_rate * tail_ms / 1000))
    ec = speexdsp.EchoCanceller.create(frame, filt, sample_rate)
    out = np.zeros(n, np.int16)
    for a in range(0, n - frame + 1, frame):
        near = np.ascontiguousarray(capture[a : a + frame], dtype=np.int16)
        far = np.ascontiguousarray(ref[a : a + frame], dtype=np.int16)
        out[a : a + frame] = np.frombuffer(ec.process(near.tobytes(), far.tobytes()), np.int16)
    tail = n % frame
    if tail:
        out[n - tail :] = capture[n - tail :]
    erle, k = _erle(capture, out, ref, frame, echo_only)
    return Cancelled(out, erle, k, erle is None or erle < MIN_ERLE_DB)


def _erle(
    raw: Pcm16,
    clean: Pcm16,
    ref: Pcm16,
    frame: int,
    spans: Sequence[tuple[int, int]] | None,
) -> tuple[float | None, int]:
    vals = []
    for a in range(0, raw.size - frame + 1, frame):
        if spans is not None and not any(s <= a and a + frame <= e for s, e in spans):
            continue
        r = ref[a : a + frame].astype(np.float64)
        x = raw[a : a + frame].astype(np.float64)
        if float(r @ r) / frame < 100.0 or float(x @ x) / frame < 1.0:
            continue  # the rig was not playing there, or nothing reached the microphone
        y = clean[a : a + frame].astype(np.float64)
        vals.append(10.0 * np.log10(float(x @ x) / max(float(y @ y), 1.0)))
    return (float(np.median(vals)), len(vals)) if vals else (None, 0)
