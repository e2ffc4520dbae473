"""The uplink: the director's frames on the pacer's deadlines, and the record of what was sent.

How this works (sans-I/O, the listener's counterpart). Per frame the session asks
`next_frame(observation)` at the frame's deadline and gets the samples, the marks (turn
boundaries, injections, releases at sample offsets) and the control requests that go
before the audio (`turn_start`: manual activity markers lead the audio they mark) and after
it (`turn_end`). Once the transport has sent it, `sent(frame, t_sent)` returns the records
(the user track, the chunk row, a stall, the marks as events at their sample's send time)
and the barge-ins the frame started, as (turn, shared-clock time) for the listener.

Fast prefill (`plan_prefill`): leading `prefill` audio may go out faster than real time
where the transport can carry it; the pacer lays the timeline out as if it had played in
real time (rig.core.pacer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.director import Director, Drain, Mark, Observation, Play, Step, TurnRecord, WaitQuiet
from rig.core.events import ControlRequest
from rig.core.framehook import FrameHook
from rig.core.pacer import Pacer
from rig.core.records import ChunkRecord, EventRecord, Record, UserAudio
from rig.core.refmarks import PlayedMark, RefMark
from rig.core.units import NS_PER_S


@dataclass(frozen=True, slots=True)
class Prefill:
    """How the leading prefill audio goes out: whole frames of it at `speed` x real time."""

    samples: int
    requested_speed: float
    speed: float = 1.0
    fast_frames: int = 0
    reason: str | None = None  # why not faster, where it was asked for

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "samples": self.samples,
            "requested_speed": self.requested_speed,
            "speed": self.speed,
            "fast_frames": self.fast_frames,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def plan_prefill(
    steps: Sequence[Step], frame_samples: int, requested_speed: float, transport_fast: bool
) -> Prefill:
    """The prefill of a script: the leading `Play(role="prefill")` steps."""
    samples = 0
    for step in steps:
        if not (isinstance(step, Play) and step.role == "prefill"):
            break
        samples += len(step.pcm)
    if samples == 0 or requested_speed <= 1.0:
        return Prefill(samples, requested_speed)
    if not transport_fast:
        why = "this transport plays audio in real time (sound card, RTP)"
        return Prefill(samples, requested_speed, reason=why)
    return Prefill(samples, requested_speed, requested_speed, samples // frame_samples)


#: not frozen (read-only by convention; rig.echo.path makes a changed copy with `replace`):
#: one is made for every frame of every stream, and a frozen dataclass's __init__ costs ~4x
@dataclass(slots=True)
class Frame:
    """One uplink frame to send at `deadline_ns`, with its marks and control requests."""

    seq: int
    deadline_ns: int
    pcm: Pcm16
    marks: tuple[Mark, ...]
    before: tuple[ControlRequest, ...] = field(default=())
    after: tuple[ControlRequest, ...] = field(default=())
    #: the director's frame before the hooks changed it (None: no hooks): user_clean.wav
    clean: Pcm16 | None = None
    #: all silence as sent (no Play in it, no hooks): its level needs no measuring
    silent: bool = False


class Uplink:
    """The user side of one rollout: script, deadlines, and the send log."""

    def __init__(self, steps: Sequence[Step], pacer: Pacer, threshold_dbfs: float = -40.0) -> None:
        cfg = pacer.config
        self.pacer = pacer
        self.rate = cfg.sample_rate
        self.n = cfg.frame_samples
        self.director = Director(steps, self.rate, self.n, pacer.t0_ns, threshold_dbfs)
        self.send_ns: list[int] = []  # actual send time of frame k
        self.played_marks: list[PlayedMark] = []  # reference marks, as played
        self.last_obs: Observation | None = None  # what the listener knew at the last frame
        self.lateness_ns: list[int] = []
        self._barges_seen = 0
        #: frame hooks (rig.core.framehook: conditions, echo), applied in order
        self.hooks: list[FrameHook] = []
        #: the last `plain_pcm` frame before the hooks (None: no hooks, the frame is clean)
        self.plain_clean: Pcm16 | None = None
        #: (track audio, position) the last `plain_pcm` frame is an unchanged view of; None:
        #: a changed frame (hooks). Its level is looked up there (rig.recordings.levels).
        self.plain_src: tuple[Pcm16, int] | None = None

    @property
    def next_seq(self) -> int:
        return self.pacer.next_seq

    @property
    def only_drain_left(self) -> bool:
        """What remains of the script only waits for the system to be quiet."""
        d = self.director
        return d.done or all(isinstance(s, Drain | WaitQuiet) for s in d.steps[d.i :])

    def next_frame(self, obs: Observation) -> Frame | None:
        """The frame due next, decided from what the listener knows; None: script over."""
        seq = self.pacer.next_seq
        self.last_obs = obs
        got = self.director.next_frame(obs)
        if got is None:
            return None
        pcm, marks = got
        clean = None
        if self.hooks:  # what the system hears: after the director, before the send
            pcm, clean = self._hooked(pcm, seq)
        silent = self.director.silent and not self.hooks
        if not marks:  # most frames: no control requests to build
            return Frame(seq, self.pacer.deadline_ns(seq), pcm, (), clean=clean, silent=silent)
        before = [
            ControlRequest("turn_start", {"turn": m.data["turn"]})
            for m in marks
            if m.kind == "turn.start"
        ]
        after = [
            ControlRequest("turn_end", {"turn": m.data["turn"]})
            for m in marks
            if m.kind == "turn.end"
        ]
        deadline = self.pacer.deadline_ns(seq)
        return Frame(seq, deadline, pcm, tuple(marks), tuple(before), tuple(after), clean, silent)

    def plain_pcm(self) -> Pcm16 | None:
        """The next frame's samples when it is a plain one, the director's shortcut inside a
        Play under way (no marks, no bounds crossed), as `next_frame` would give them, and
        `sent_plain_seq` will take it (real time, no barge-in pending); None: nothing taken,
        ask `next_frame`. The tick's path for most frames: no `Frame` (rig.sessiontick).
        With frame hooks (conditions) they are applied here as `next_frame` applies them,
        and `plain_clean` holds the frame before them (user_clean.wav); None without.
        `plain_src`: where in its track the frame is a view of (None with hooks)."""
        d = self.director
        if (
            not d.fast_play
            or d.done
            or self.pacer.next_seq < self.pacer.fast_frames
            or self._barges_seen < len(d.barge_ins)
        ):
            return None
        if not self.hooks:
            self.plain_clean = None
            view = d._inside_play(copy=False)
            self.plain_src = None if view is None else d.view_at
            return view
        self.plain_src = None
        pcm = d._inside_play()  # a copy: hooks may change it in place
        if pcm is None:
            return None
        pcm, self.plain_clean = self._hooked(pcm, self.pacer.next_seq)
        return pcm

    def _hooked(self, pcm: Pcm16, seq: int) -> tuple[Pcm16, Pcm16]:
        """Frame `seq` through the hooks in order, and the frame before them."""
        clean = pcm
        for hook in self.hooks:
            pcm = hook.apply(pcm, seq * self.n)
        return pcm, clean

    def sent_plain(self, frame: Frame, t_sent_ns: int) -> tuple[int, list[Record]] | None:
        """`sent` for most frames of a stream: a real-time frame with no marks that starts
        no barge-in. Its lateness and only the records besides its audio and chunk line (a
        stall), which the caller writes itself from the frame (rig.recordings: one hand-off
        to the writer, no record objects per frame); None: not such a frame, nothing
        recorded: call `sent`."""
        if (
            frame.marks
            or frame.seq < self.pacer.fast_frames
            or self._barges_seen < len(self.director.barge_ins)
        ):
            return None
        return self.sent_plain_seq(frame.seq, t_sent_ns)

    def sent_plain_seq(self, seq: int, t_sent_ns: int) -> tuple[int, list[Record]]:
        """`sent_plain` once the frame is known to be plain (`plain_pcm` gave it)."""
        late, stall = self.pacer.record(t_sent_ns)
        self.send_ns.append(t_sent_ns)
        self.lateness_ns.append(late)
        if stall:
            return late, [EventRecord("stall", t_sent_ns, {"seq": seq, "lateness_ns": late})]
        return late, []

    def sent(
        self, frame: Frame, t_sent_ns: int, extra: dict[str, Any] | None = None
    ) -> tuple[list[Record], list[tuple[int, int]]]:
        """`frame` went out at `t_sent_ns`: its records, and the barge-ins it started as
        (turn index, shared-clock time of the turn's first speech sample)."""
        late, stall = self.pacer.record(t_sent_ns)
        self.send_ns.append(t_sent_ns)
        self.lateness_ns.append(late)
        seq, n, rate = frame.seq, self.n, self.rate
        if seq < self.pacer.fast_frames:
            extra = {**(extra or {}), "prefill_speed": self.pacer.speed}  # a fast history frame
        records: list[Record] = [
            UserAudio(frame.pcm, frame.clean),
            ChunkRecord(
                "up",
                seq,
                n,
                rate,
                t_sent_ns,
                frame.deadline_ns,
                late,
                extra=extra,
                pcm=frame.pcm,  # its level: computed by the writer thread (ChunkRecord.level)
            ),
        ]
        if stall:
            records.append(EventRecord("stall", t_sent_ns, {"seq": seq, "lateness_ns": late}))
        for mark in frame.marks:
            if mark.kind == "step.start":
                continue
            at = seq * n + mark.offset
            if seq < self.pacer.fast_frames:  # a fast frame's samples go out at its speed
                t_mark = t_sent_ns + self.pacer.sample_ns(at) - self.pacer.sample_ns(seq * n)
            else:
                t_mark = t_sent_ns + mark.offset * NS_PER_S // rate
            if mark.kind == "mark":
                records.append(self._played(mark.data["ref"], at, t_mark, seq))
                continue
            data = {"sample": at, "frame_seq": seq, **mark.data}
            records.append(EventRecord(mark.kind, t_mark, data))
        barge_ins = []
        director = self.director
        while self._barges_seen < len(director.barge_ins):
            at = director.barge_ins[self._barges_seen]
            self._barges_seen += 1
            turn = director.turns[-1].index if director.turns else -1
            barge_ins.append((turn, t_sent_ns + (at - seq * n) * NS_PER_S // rate))
        return records, barge_ins

    def _played(self, ref: RefMark, at: int, t_ns: int, seq: int) -> EventRecord:
        """A reference mark whose first sample (session position `at`) left at `t_ns`; a
        span's end on the pacer's schedule from there."""
        end_ns = None
        if ref.end is not None:
            end_at = at + ref.end - ref.start
            end_ns = t_ns + self.pacer.sample_ns(end_at) - self.pacer.sample_ns(at)
        played = PlayedMark(ref.mark, t_ns, end_ns, ref.label, ref.step, at)
        self.played_marks.append(played)
        return played.record(seq)

    @property
    def talking_at_end(self) -> bool:
        """Was the system still talking at the last frame (loud audio still queued, or in
        a gap shorter than the drain's quiet rule)?"""
        obs = self.last_obs
        if obs is None or obs.onsets == 0:
            return False
        if obs.system_busy:
            return True
        d = self.director
        step = d.steps[d.i] if not d.done else None
        quiet_s = step.quiet_s if isinstance(step, Drain | WaitQuiet) else 0.0
        since = obs.system_quiet_since_ns
        return since is not None and obs.t_ns - since < quiet_s * NS_PER_S

    @property
    def user_track_ns(self) -> float:
        """Length of the user track so far (frames sent), in ns."""
        return len(self.send_ns) * self.pacer.config.frame_ns

    def timed_turns(self) -> tuple[TurnRecord, ...]:
        """User turns actually played (injections and prefills are not timed as turns)."""
        return tuple(
            t for t in self.director.turns if t.role == "turn" and t.speech_end_sample is not None
        )
