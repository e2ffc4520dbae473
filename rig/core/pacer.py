"""The uplink pacer: absolute deadlines on the shared clock.

How this works: frame k of a stream is due at `t0_ns + k * frame_samples * 1e9 / rate`,
computed from the integer sample count each time (never by adding a frame duration to the
previous deadline, never by sleeping one frame per frame). Rounding error therefore never
accumulates: deadline k is within 1 ns of the exact instant for every k, so the stream has
zero cumulative drift by construction.

The pacer does not sleep and does not read a clock. The session asks for the next deadline,
waits for it however it likes, sends, and reports the actual send time with `record()`. The
pacer turns that into a `FrameTiming` (deadline, actual, lateness, stall flag). A frame sent
more than `stall_threshold_ns` late (default: one frame) is a stall.

Fast prefill: the first `fast_frames` frames (history audio) can go out `speed` times faster
than real time. The session timeline is then laid out as if that history had been played in
real time and ended exactly when the live part starts: frame k >= fast_frames is still due at
`t0 + k * frame`, and frame k < fast_frames at `t_fast0 + k * frame / speed`, where `t_fast0`
puts the last fast frame's end on the first live deadline. Both are computed from k alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from rig.core.timeline import Timeline
from rig.core.units import NS_PER_S


@dataclass(frozen=True, slots=True)
class PacerConfig:
    sample_rate: int = 16_000
    frame_samples: int = 320  # 20 ms at 16 kHz
    stall_threshold_frames: float = 1.0

    @property
    def frame_ns(self) -> float:
        return self.frame_samples * NS_PER_S / self.sample_rate

    @property
    def frame_ms(self) -> float:
        return self.frame_ns / 1e6

    @classmethod
    def from_ms(cls, sample_rate: int, frame_ms: float = 20.0) -> PacerConfig:
        samples = round(sample_rate * frame_ms / 1000)
        if samples <= 0:
            raise ValueError(f"frame of {frame_ms} ms at {sample_rate} Hz has no samples")
        return cls(sample_rate=sample_rate, frame_samples=samples)


class Pacer:
    """Deadlines for one uplink stream, and the lateness record of what was sent."""

    def __init__(
        self, config: PacerConfig, t0_ns: int, *, fast_frames: int = 0, speed: float = 1.0
    ) -> None:
        if speed < 1.0:
            raise ValueError(f"prefill speed must be >= 1 (x real time), got {speed}")
        self.config = config
        self.t0_ns = t0_ns
        self.timeline = Timeline(t0_ns, config.sample_rate)
        self.fast_frames = max(0, fast_frames) if speed > 1.0 else 0
        self.speed = speed if self.fast_frames else 1.0
        live0 = self.timeline.time_of(self.fast_frames * config.frame_samples)
        self.t_fast0_ns = live0 - round(self.fast_frames * config.frame_ns / self.speed)
        self.next_seq = 0
        self.stalls = 0
        self.max_lateness_ns = 0
        self._stall_ns = int(config.stall_threshold_frames * config.frame_ns)
        #: frame k is due k·_frame_num // _rate ns after t0 (the product made once: this
        #: runs a few times per frame of every stream)
        self._frame_num = config.frame_samples * NS_PER_S
        self._rate = config.sample_rate

    def deadline_ns(self, seq: int) -> int:
        """Deadline of frame `seq`: exact sample arithmetic, floor to the ns."""
        if seq < self.fast_frames:
            return self.t_fast0_ns + round(seq * self.config.frame_ns / self.speed)
        return self.t0_ns + (seq * self._frame_num) // self._rate

    def sample_ns(self, sample: int) -> int:
        """When sample position `sample` is due to go out: inside the fast prefill's frames
        at `speed` x real time, on the timeline after them (the schedule deadlines follow)."""
        rate = self.config.sample_rate
        if sample < self.fast_frames * self.config.frame_samples:
            return self.t_fast0_ns + round(sample * NS_PER_S / (rate * self.speed))
        return self.timeline.time_of(sample)

    @staticmethod
    def head_start_ns(config: PacerConfig, fast_frames: int, speed: float) -> int:
        """How much earlier than the first deadline the timeline origin t0 lies when
        `fast_frames` go out at `speed` (0 without a fast prefill)."""
        if fast_frames <= 0 or speed <= 1.0:
            return 0
        return round(fast_frames * config.frame_ns * (1.0 - 1.0 / speed))

    @staticmethod
    def origin_ns(
        config: PacerConfig, now_ns: int, lead_ns: int, fast_frames: int, speed: float,
        phase: float | None,
    ) -> int:  # fmt: skip
        """The timeline origin t0 of a stream starting `lead_ns` from now: earlier by a fast
        prefill's head start, then on its `phase` of the frame period (None: anywhere)."""
        t0 = now_ns + lead_ns - Pacer.head_start_ns(config, fast_frames, speed)
        if phase is not None:
            frame_ns = round(config.frame_ns)
            t0 += (round(phase * frame_ns) - t0) % frame_ns
        return t0

    @property
    def next_deadline_ns(self) -> int:
        return self.deadline_ns(self.next_seq)

    def record(self, t_sent_ns: int) -> tuple[int, bool]:
        """Record that the next frame went out at `t_sent_ns`; returns (lateness_ns, is_stall).
        (A tuple, not a record object: this runs for every frame of every stream.)"""
        late = t_sent_ns - self.deadline_ns(self.next_seq)
        self.next_seq += 1
        if late > self.max_lateness_ns:
            self.max_lateness_ns = late
        stall = late > self._stall_ns
        if stall:
            self.stalls += 1
        return late, stall

    def skip_to(self, t_ns: int) -> int:
        """After a stall, how many frames are already due at `t_ns` (for catch-up policy)."""
        due = 0
        while self.deadline_ns(self.next_seq + due) <= t_ns:
            due += 1
        return due
