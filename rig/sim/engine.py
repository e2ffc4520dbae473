"""The reference system's brain, sans-I/O: endpointing, model latency, reply streaming.

How this works: the server shell feeds every input chunk with the true time it reached the
"model" (`t_ns`, after any simulated uplink delay) and asks `poll(now)` for what to emit.

- Endpointing: an energy gate on 10 ms blocks. Speech starts after `speech_start_ms` of loud
  blocks; it ends when `endpoint_silence_ms` of audio after the last loud sample has been
  received. The detection time is the arrival of the chunk that completes that silence.
- Model latency: the reply starts `latency_ms` after detection (ground truth, exact).
- Reply streaming: the reply audio (a tone or a file) is cut into `chunk_ms` chunks emitted
  at `reply_start + i * chunk_ms / speed`: `speed=1` is real time, `speed>1` faster than real
  time, `speed=0` all at once (a burst).
- Barge-in: speech starting while a reply is still being emitted cancels the rest; with
  `yield_after_ms` the reply instead stops exactly that long after the barge-in is detected
  (the chunk straddling the cut is shortened so its audio ends at the cut, in real-time
  reply time), and `reply_cancel` is logged at the cut with `barge_in_ns` and `audio_end_ns`.
- Its own echo: by default the input passes an echo canceller that knows what the system
  said (rig.sim.selfecho), so the rig's echo condition does not make it interrupt itself;
  `self_echo_sensitive` turns that off and its VAD yields to its own echo.
- Silent-frame omission: with `omit_silence`, silent reply chunks are not sent (their time
  still passes), as systems that suppress silence do.

- Policies (baselines, so every metric can be sanity-checked): `reply` (the default: a
  fixed delay, `endpoint_silence_ms` + `latency_ms` after the user's last loud sample),
  `never` (hears everything, never says anything), `always` (talks whenever the user is
  quiet: 100 ms of silence ends a turn, no model latency, a 30 s reply, stopped only by a
  barge-in), `backchannel` (a 0.3 s "mhm" tone after every 150 ms pause, never a reply).

Every decision is returned as a `Truth` record on the true shared clock, for the truth log.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.clock.base import NS_PER_MS, NS_PER_S
from rig.sim.selfecho import OwnEchoCanceller

BLOCK_MS = 10
POLICIES: tuple[str, ...] = ("reply", "never", "always", "backchannel")
VOICES: tuple[str, ...] = ("tone", "buzz", "whisper")
FOLLOW_REF_DBFS = -20.0
DEFAULT_LEVEL_DBFS = -12.0
#: the last 100 ms are noise-like (their blocks may be the noise floor) when their peak is
#: this many times their RMS: Gaussian noise of any colour almost always (expected ~3.4 over
#: 1600 samples), a sine never (1.41)
NOISE_CREST = 2.5
#: policy -> (endpoint silence ms, latency ms, reply s) it forces (None: the config's)
_POLICY_TIMING: dict[str, tuple[float, float, float]] = {
    "always": (100.0, 0.0, 30.0),
    "backchannel": (150.0, 50.0, 0.3),
}


@dataclass(frozen=True, slots=True)
class SimConfig:
    sample_rate: int = 16_000
    latency_ms: float = 400.0
    endpoint_silence_ms: float = 500.0
    speech_start_ms: float = 60.0
    threshold_dbfs: float = -40.0
    chunk_ms: float = 40.0
    reply_speed: float = 1.0
    reply_tone_hz: float = 440.0
    reply_s: float = 1.0
    reply_level_dbfs: float = -12.0
    reply_gap_ms: float = 0.0
    omit_silence: bool = False
    barge_in: bool = True
    yield_after_ms: float = 0.0
    policy: str = "reply"
    #: the reply's voice: a sine (`tone`), a harmonic buzz at reply_tone_hz (`buzz`: voiced,
    #: high HNR) or noise-excited (`whisper`: no harmonics); ground truth for voice measures
    reply_voice: str = "tone"
    #: each reply's level follows the user's turn: +1 dB per dB the turn's loud blocks sit
    #: above or below -20 dBFS RMS (clamped to -40..+12 dB)
    reply_follow_level: bool = False
    #: a turn quieter than this (RMS of its loud blocks, dBFS) gets a whispered reply
    whisper_below_dbfs: float | None = None
    #: the gate rises to this far above the noise floor (the quietest noise-like 10 ms block
    #: RMS of the last second: minimum statistics), so steady room noise does not hold a
    #: turn open; clean input (digital silence between words, quiet closures, tones) keeps
    #: the fixed gate
    noise_floor_margin_db: float | None = 18.0
    #: its VAD hears its own reply when the rig feeds it back (rig run --echo) and yields to
    #: it; the default cancels its own echo first (rig.sim.selfecho)
    self_echo_sensitive: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.reply_voice not in VOICES:
            raise ValueError(f"reply_voice must be one of {', '.join(VOICES)}")

    def effective(self) -> SimConfig:
        """The config with the timing the policy forces (docs/reference-system.md)."""
        forced = _POLICY_TIMING.get(self.policy)
        if forced is None:
            return self
        end_ms, lat_ms, reply_s = forced
        return dataclasses.replace(
            self, endpoint_silence_ms=end_ms, latency_ms=lat_ms, reply_s=reply_s, reply_gap_ms=0
        )

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Truth:
    event: str
    t_ns: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Emit:
    """One reply chunk to send, due at `t_ns` (true clock, before downlink delay)."""

    seq: int
    t_ns: int
    pcm: Pcm16
    response: int


def make_reply(
    cfg: SimConfig, audio: Pcm16 | None = None, voice: str | None = None, gain_db: float = 0.0
) -> Pcm16:
    voice = voice or cfg.reply_voice
    # a file plays at its own level, moved by as much as reply_level_dbfs is off -12 dBFS
    gain = 10 ** ((gain_db + cfg.reply_level_dbfs - DEFAULT_LEVEL_DBFS) / 20)
    if audio is not None and voice != "whisper":
        if gain == 1.0:
            return audio
        return np.asarray(np.clip(np.rint(audio * gain), -32768, 32767), dtype=np.int16)
    n = round(cfg.reply_s * cfg.sample_rate) if audio is None else audio.size
    t = np.arange(n) / cfg.sample_rate
    rms = 10 ** ((cfg.reply_level_dbfs + gain_db) / 20) * 32767
    if voice == "whisper":  # noise-excited: no harmonics at all (seeded: the same each time)
        wave = np.random.default_rng(n).standard_normal(n)
    elif voice == "buzz":  # harmonics of reply_tone_hz falling 6 dB/octave, up to 4 kHz
        k_max = max(1, int(min(4000.0, cfg.sample_rate / 2 - 1) // cfg.reply_tone_hz))
        wave = np.zeros(n)
        for k in range(1, k_max + 1):
            wave += np.sin(2 * np.pi * k * cfg.reply_tone_hz * t) / k
    else:
        wave = np.sin(2 * np.pi * cfg.reply_tone_hz * t)
    wave = np.asarray(wave, dtype=np.float64)
    wave = wave / max(float(np.sqrt(np.mean(wave**2))), 1e-12)
    x = np.clip(rms * wave, -32768, 32767).astype(np.int16)
    if cfg.reply_gap_ms > 0:
        gap = round(cfg.reply_gap_ms / 1000 * cfg.sample_rate)
        half = n // 2
        x = np.concatenate([x[:half], np.zeros(gap, np.int16), x[half:]]).astype(np.int16)
    return np.asarray(x, dtype=np.int16)


class SimEngine:
    """One conversation of the reference system."""

    def __init__(self, cfg: SimConfig, reply_audio: Pcm16 | None = None) -> None:
        cfg = cfg.effective()
        self.cfg = cfg
        self.reply = make_reply(cfg, reply_audio if cfg.policy == "reply" else None)
        self._block = cfg.sample_rate * BLOCK_MS // 1000
        self._thresh = 32768.0 * 10 ** (cfg.threshold_dbfs / 20)
        self._speech_start_blocks = max(1, round(cfg.speech_start_ms / BLOCK_MS))
        self._silence_samples = round(cfg.endpoint_silence_ms / 1000 * cfg.sample_rate)
        self._chunk = max(1, round(cfg.chunk_ms / 1000 * cfg.sample_rate))
        self.received_samples = 0
        self._carry = np.zeros(0, np.int16)
        self._loud_run = 0
        self.in_speech = False
        self._last_loud_sample = -1  # index on the input timeline
        self._last_loud_t_ns = 0  # true arrival time of that sample
        self._queue: list[Emit] = []
        self._reply_seq = 0
        self.responses = 0
        self.truths: list[Truth] = []
        self._started: set[int] = set()
        self._cancel: Truth | None = None  # a delayed yield, due at its t_ns
        self._audio = reply_audio if cfg.policy == "reply" else None
        self._turn_sq = 0.0  # the user turn's loud blocks: sum of squares, samples
        self._turn_n = 0
        self._block_ms: deque[float] = deque(maxlen=1000 // BLOCK_MS)  # last second's blocks
        self._floor_zeros = 0  # how many of them are 0.0 (not noise-like, or silent)
        self._recent_ms: deque[float] = deque(maxlen=100 // BLOCK_MS)  # last 100 ms's blocks
        self._recent_peak: deque[float] = deque(maxlen=100 // BLOCK_MS)
        self.own_echo = None if cfg.self_echo_sensitive else OwnEchoCanceller(cfg.sample_rate)
        self._gate_now = self._thresh  # the gate of the last input block (a loudness pre-check)
        margin = cfg.noise_floor_margin_db
        self._floor_gain = None if margin is None else 10 ** (margin / 20)

    # --- input ------------------------------------------------------------------------

    def on_audio(self, pcm: Pcm16, t_ns: int) -> list[Truth]:
        """An input chunk reached the model at `t_ns`. Returns truth records it caused.

        Every 10 ms block's sum of squares and peak come from one pass over the chunk (exact
        integers: what a dot product per block gave); the gate and the speech state then
        step through the blocks on those scalars."""
        out: list[Truth] = []
        mag = None  # |pcm|, while the canceller hands the chunk back as it came
        if self.own_echo is not None:  # what it hears of the user, less its own reply
            # a chunk under the gate of the last block cannot start speech: no fit needed
            mag = np.abs(pcm.astype(np.int32))
            hearable = pcm.size > 0 and int(mag.max()) > self._gate_now
            cleaned = self.own_echo.clean(pcm, t_ns, hearable=hearable)
            mag = mag if cleaned is pcm else None
            pcm = cleaned
        carried = self._carry.size
        data = np.concatenate([self._carry, pcm]) if carried else pcm
        base = self.received_samples - carried  # input index of data[0]
        chunk_start = self.received_samples  # index of pcm[0]
        bs = self._block
        n_blocks = data.size // bs
        if n_blocks:
            used = n_blocks * bs
            if mag is None or carried:
                mag = np.abs(data[:used].astype(np.int32))
            mags = mag[:used].reshape(n_blocks, bs)
            # exact: |x|**2 <= 2**30 fits int32, each block's sum (< 2**38) is made in int64
            sums = np.multiply(mags, mags).sum(axis=1, dtype=np.int64).tolist()
            peaks = mags.max(axis=1).tolist()
            loud = -1  # the chunk's last loud block (its last loud sample is kept after it)
            loud_gate = 0.0
            for b in range(n_blocks):
                gate = self._gate_now = self._gate_of(sums[b], peaks[b], bs)
                if peaks[b] <= gate:
                    self._loud_run = 0
                    continue
                self._loud_run += 1
                self._turn_sq += float(sums[b])
                self._turn_n += bs
                loud, loud_gate = b, gate
                if not self.in_speech and self._loud_run >= self._speech_start_blocks:
                    last = self._loud_until(mags, b, gate, base, chunk_start, t_ns)
                    self.in_speech = True
                    out.append(Truth("speech_start", t_ns, {"input_ms": self._ms(last)}))
                    out.extend(self._barge_in(t_ns))
            if loud >= 0:
                self._loud_until(mags, loud, loud_gate, base, chunk_start, t_ns)
        self._carry = data[n_blocks * bs :].copy()
        self.received_samples += pcm.size
        if self.in_speech:
            silent = self.received_samples - 1 - self._last_loud_sample
            if silent >= self._silence_samples:
                self.in_speech = False
                out.append(
                    Truth(
                        "speech_end",
                        t_ns,
                        {
                            "audio_end_ns": self._last_loud_t_ns,
                            "audio_end_input_ms": self._ms(self._last_loud_sample + 1),
                        },
                    )
                )
                out.extend(self._schedule_reply(t_ns))
        self.truths.extend(out)
        return out

    def _loud_until(
        self, mags: npt.NDArray[np.int32], b: int, gate: float, base: int, chunk_start: int,
        t_ns: int,
    ) -> int:  # fmt: skip
        """Note loud block `b`'s last sample over the gate as the last loud one (its index
        on the input timeline, and when it arrived); only for the blocks that need it (a
        speech start, the chunk's last loud block), most often its last sample."""
        row = mags[b]
        k = int(row.size) - 1
        if not row[k] > gate:
            k = int(np.flatnonzero(row > gate)[-1])
        last = base + b * int(row.size) + k
        self._last_loud_sample = last
        # the sample sits (last - chunk_start) samples after the chunk's first sample;
        # samples carried from the previous chunk arrived with it (negative offset)
        self._last_loud_t_ns = t_ns + ((last - chunk_start) * NS_PER_S) // self.cfg.sample_rate
        return last

    def _gate(self, blk: Pcm16) -> float:
        """The gate for one block on its own (what `on_audio` does per block)."""
        x = blk.astype(np.int64)
        peak = int(np.max(np.abs(x))) if x.size else 0
        return self._gate_of(int(x @ x), peak, x.size)

    def _gate_of(self, sq: int, peak: int, n: int) -> float:
        """The energy gate for a block of `n` samples with this sum of squares and peak:
        fixed, or above the tracked noise floor."""
        gain = self._floor_gain
        if gain is None:
            return self._thresh
        ms = sq / max(1, n)
        recent, peaks = self._recent_ms, self._recent_peak
        recent.append(ms)
        peaks.append(float(peak))
        # only noise-like stretches can be the floor: the last 100 ms peak at least
        # NOISE_CREST times their RMS. A steady tone (crest sqrt 2) never raises the gate,
        # so a long tone turn stays one turn (it counts as silence here)
        rms = math.sqrt(sum(recent) / len(recent))
        floors = self._block_ms
        if len(floors) == floors.maxlen and floors[0] == 0.0:
            self._floor_zeros -= 1
        if rms > 0 and max(peaks) >= NOISE_CREST * rms:
            floors.append(ms)
            if ms == 0.0:
                self._floor_zeros += 1
        else:
            floors.append(0.0)
            self._floor_zeros += 1
        # a mean square is never below 0: with a zero in the second, the floor is 0 and the
        # gate the fixed one (the threshold is above 0)
        if self._floor_zeros:
            return self._thresh
        return max(self._thresh, math.sqrt(min(floors)) * gain)

    def _ms(self, sample: int) -> float:
        return round(sample * 1000 / self.cfg.sample_rate, 3)

    def _schedule_reply(self, detect_ns: int) -> list[Truth]:
        if self.cfg.policy == "never":
            return []
        start = detect_ns + round(self.cfg.latency_ms * NS_PER_MS)
        self.responses += 1
        resp = self.responses
        reply, how = self._reply_for_turn()
        step_ns = (
            0
            if self.cfg.reply_speed <= 0
            else self._chunk * NS_PER_S / self.cfg.sample_rate / self.cfg.reply_speed
        )
        for i, off in enumerate(range(0, reply.size, self._chunk)):
            pcm = reply[off : off + self._chunk]
            self._queue.append(Emit(-1, start + round(i * step_ns), pcm, resp))
        data = {"response": resp, "reply_start_ns": start, **how}
        return [Truth("reply_scheduled", detect_ns, data)]

    def _reply_for_turn(self) -> tuple[Pcm16, dict[str, Any]]:
        """The reply to the turn that just ended: as configured, or following its level."""
        cfg = self.cfg
        rms_db = (
            10 * math.log10(self._turn_sq / self._turn_n / 32768.0**2)
            if self._turn_n and self._turn_sq > 0
            else None
        )
        self._turn_sq, self._turn_n = 0.0, 0
        if rms_db is None or (not cfg.reply_follow_level and cfg.whisper_below_dbfs is None):
            return self.reply, {}
        gain = min(12.0, max(-40.0, rms_db - FOLLOW_REF_DBFS)) if cfg.reply_follow_level else 0.0
        quiet = cfg.whisper_below_dbfs is not None and rms_db < cfg.whisper_below_dbfs
        voice = "whisper" if quiet else cfg.reply_voice
        how = {"user_rms_dbfs": round(rms_db, 2), "reply_gain_db": round(gain, 2), "voice": voice}
        return make_reply(cfg, self._audio, voice, gain), how

    def _barge_in(self, t_ns: int) -> list[Truth]:
        if not self.cfg.barge_in or not self._queue:
            return []
        resp = self._queue[0].response
        if self.cfg.yield_after_ms > 0:
            if self._cancel is not None:  # already stopping
                return []
            self._cancel = self._cut_at(t_ns + round(self.cfg.yield_after_ms * NS_PER_MS), t_ns)
            return []
        dropped = len(self._queue)
        self._queue.clear()
        return [Truth("reply_cancel", t_ns, {"response": resp, "chunks_dropped": dropped})]

    def _cut_at(self, cut_ns: int, barge_ns: int) -> Truth:
        """Keep the reply audio that plays before `cut_ns` (reply time), drop the rest."""
        resp = self._queue[0].response
        rate, speed = self.cfg.sample_rate, self.cfg.reply_speed
        kept: list[Emit] = []
        dropped = 0
        for e in self._queue:
            if e.response != resp:
                kept.append(e)
                continue
            if e.t_ns >= cut_ns:
                dropped += 1
                continue
            # real-time content time of the chunk's first sample is its due time
            n = e.pcm.size if speed != 1 else ((cut_ns - e.t_ns) * rate) // NS_PER_S
            kept.append(Emit(e.seq, e.t_ns, e.pcm[: max(1, min(e.pcm.size, n))], e.response))
        self._queue = kept
        data = {"response": resp, "chunks_dropped": dropped, "barge_in_ns": barge_ns}
        return Truth("reply_cancel", cut_ns, {**data, "audio_end_ns": cut_ns})

    def said(self, t_ns: int, pcm: Pcm16) -> None:
        """A reply chunk left the system at `t_ns` (sent, written to the device): the
        reference of its own echo canceller (the shell calls this at the real send time,
        so a late send's gap is in the reference as it is in the echo)."""
        if self.own_echo is not None:
            self.own_echo.played(t_ns, pcm)

    # --- output -----------------------------------------------------------------------

    def next_due_ns(self) -> int | None:
        """The earliest of the next reply chunk and a delayed yield (asked per input chunk:
        two comparisons, no list)."""
        cancel = self._cancel
        if not self._queue:
            return None if cancel is None else cancel.t_ns
        head = self._queue[0].t_ns
        return head if cancel is None or head <= cancel.t_ns else cancel.t_ns

    def poll(self, now_ns: int) -> tuple[list[Emit], list[Truth]]:
        """Reply chunks due by `now_ns` (each keeps its own due time), and their truths."""
        emits: list[Emit] = []
        truths: list[Truth] = []
        while self._queue and self._queue[0].t_ns <= now_ns:
            e = self._queue.pop(0)
            first = e.response not in self._started
            if self.cfg.omit_silence and not np.any(e.pcm):
                truths.append(
                    Truth("reply_omit", e.t_ns, {"response": e.response, "n": e.pcm.size})
                )
                continue
            emit = Emit(self._reply_seq, e.t_ns, e.pcm, e.response)
            self._reply_seq += 1
            if first:
                self._started.add(e.response)
                truths.append(Truth("reply_start", e.t_ns, {"response": e.response}))
            emits.append(emit)
            if not any(x.response == e.response for x in self._queue):
                truths.append(Truth("reply_end", e.t_ns, {"response": e.response}))
        if self._cancel is not None and self._cancel.t_ns <= now_ns:
            truths.append(self._cancel)
            self._cancel = None
        self.truths.extend(truths)
        return emits, truths
