"""The director: what the rig plays next, decided frame by frame from what it has heard.

How this works: a script is a list of steps. At each uplink deadline the session hands the
director an `Observation` (the time, and the playback-clock facts about the system: is its
speech still being heard, when did it last fall quiet, when did its latest reply start) and
gets back exactly one frame of samples plus marks (turn boundaries, injections, releases) at
sample offsets. Steps:

  Play         audio (a user turn, an injection, a backchannel, a prefill), sample-exact
  Pause        silence of a fixed length
  WaitQuiet    silence until the system has spoken and then been quiet for `quiet_s` on the
               playback clock (the release rule "next turn after the system is done"), or
               `timeout_s` after the step began
  WaitOnset    silence until `offset_s` after the onset of the system's next reply *as played*
               (injections land N s into the reply a listener hears, not N s after arrival:
               a system that sends audio faster than real time is queued, not skipped), or
               `timeout_s`; the target instant is known in advance, so the next step starts
               at the exact sample inside the frame
  Drain        silence until the system has been quiet for `quiet_s` (extended while it talks),
               or `max_s`; with `wait_first_s`, a system that has said nothing since the
               last Play gets up to that much longer before the quiet counts ("3 s of
               silence, plus up to 8 s more while no audio has come yet"). A drain cut at
               `max_s` while the system was still talking is `censored`.
Reference marks (rig.core.refmarks) ride on a Play; each comes out as a `mark` at the sample
offset of its first sample.

Sans-I/O: no clock, no sleeping. Time comes in with each observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.core.plan import speech_bounds_once
from rig.core.refmarks import RefMark
from rig.core.timeline import Timeline
from rig.core.units import NS_PER_S


#: not frozen (read-only by convention): one is made for every frame of every stream, and a
#: frozen dataclass's __init__ costs ~4x a plain one's (object.__setattr__ per field)
@dataclass(slots=True)
class Observation:
    t_ns: int  # shared-clock instant of this frame's first sample
    system_busy: bool  # loud system audio still queued at or after t_ns (playback clock)
    system_quiet_since_ns: int | None  # playback end of the last loud system audio
    last_onset_ns: int | None  # playback onset of the latest system speech segment
    onsets: int  # how many system segments so far


@dataclass(frozen=True, slots=True)
class Mark:
    kind: str  # turn.start, turn.end, inject, release, drain.end, step.start, mark
    offset: int  # sample offset in this frame
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Play:
    pcm: Pcm16
    label: str = ""
    role: str = "turn"  # turn | interruption | backchannel | prefill
    barge_in: bool = True  # does starting it truncate the listener's playback queue?
    marks: tuple[RefMark, ...] = ()  # reference marks at sample offsets in `pcm`


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class WaitQuiet:
    quiet_s: float
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class WaitOnset:
    offset_s: float
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Drain:
    quiet_s: float = 1.5
    max_s: float = 30.0
    wait_first_s: float = 0.0  # extra wait while the system has said nothing yet


Step = Play | Pause | WaitQuiet | WaitOnset | Drain


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """A played turn on the session timeline (samples)."""

    index: int
    role: str
    label: str
    start_sample: int
    end_sample: int
    speech_start_sample: int | None
    speech_end_sample: int | None


class Director:
    def __init__(
        self,
        steps: Sequence[Step],
        sample_rate: int,
        frame_samples: int,
        t0_ns: int,
        threshold_dbfs: float = -40.0,
    ) -> None:
        self.steps = list(steps)
        self.rate = sample_rate
        self.n = frame_samples
        self.timeline = Timeline(t0_ns, sample_rate)
        self.threshold_dbfs = threshold_dbfs
        self.i = 0  # current step
        self.pos = 0  # samples into the current step
        self.sample = 0  # session timeline position (next sample to produce)
        self.step_start_ns: int | None = None
        self.onsets_at_step_start = 0
        self.turns: list[TurnRecord] = []
        self.barge_ins: list[int] = []  # sample positions where a Play asked for truncation
        #: every Play's speech bounds, measured here, before the stream starts, and once per
        #: audio array: not inside the tick at each step's start (rig.core.plan)
        self._bounds: dict[int, tuple[int, int] | None] = {
            i: speech_bounds_once(s.pcm, sample_rate, threshold_dbfs)
            for i, s in enumerate(self.steps)
            if isinstance(s, Play)
        }
        self._release: dict[str, Any] = {}
        self.onsets_at_play_end = 0  # system onsets heard when the last Play ended
        #: a drain hit its cap while the system was still talking (the reply was cut)
        self.censored = False

    @property
    def done(self) -> bool:
        return self.i >= len(self.steps)

    def next_frame(self, obs: Observation) -> tuple[Pcm16, list[Mark]] | None:
        """One frame of samples and its marks; None once the script is over."""
        if self.done:
            return None
        if self.fast_play:
            fast = self._inside_play()
            if fast is not None:
                self.silent = False  # a Play's samples (never a stale mark of an earlier frame)
                return fast, []
        out = np.zeros(self.n, dtype=np.int16)
        marks: list[Mark] = []
        filled = 0
        played = False  # a Play gave samples to this frame
        while filled < self.n and not self.done:
            step = self.steps[self.i]
            if self.pos == 0 and self.step_start_ns is None:
                self.step_start_ns = self.timeline.time_of(self.sample)
                self.onsets_at_step_start = obs.onsets
                info = {"step": self.i, "type": type(step).__name__}
                marks.append(Mark("step.start", filled, info))
                if isinstance(step, Play):
                    self._start_play(step, filled, marks)
            took = self._advance(step, obs, out, filled, marks)
            played = played or (took > 0 and isinstance(step, Play))
            filled += took
            self.sample += took
            if self._step_over(step, obs):
                self._end_step(step, filled, marks)
            elif took == 0:
                # a waiting step holds the rest of this frame in silence
                self.sample += self.n - filled
                self.pos += self.n - filled
                filled = self.n
        if filled == 0 and self.done and not any(m.kind != "step.start" for m in marks):
            return None  # the script ended exactly at this frame's start, nothing to mark
        if filled < self.n:  # script ended mid-frame: pad with silence
            self.sample += self.n - filled
        self.silent = not played
        return out, marks

    #: the shortcut below (tests turn it off to compare with the general path)
    fast_play = True
    #: (the step's audio, the position) of the last view `_inside_play` gave: the writer
    #: looks its level up there (rig.recordings.levels) instead of measuring the frame
    view_at: tuple[Pcm16, int] | None = None
    #: the last `next_frame` frame (not the shortcut's) is all silence: no Play in it (its
    #: level is known without measuring: most frames between a run's turns)
    silent = False
    #: the current Play's shortcut window (`_open_window`), None until one is opened
    _window: tuple[int, Pcm16, Pcm16, int] | None = None

    def _inside_play(self, copy: bool = True) -> Pcm16 | None:
        """Most frames of a turn: the next `n` samples of a Play already under way that
        neither ends nor crosses a speech bound in this frame; no marks, so no general step
        loop per frame. None: take the general path. A copy, since frame hooks may change a
        frame in place; `copy=False` (no hooks: `Uplink.plain_pcm`) gives a read-only view of
        the step's samples instead: no malloc on the loop for the writer thread to free
        (py-spy --native: a third of this method; docs/pacing.md, eleventh pass).

        The checks are made once per stretch, not per frame (`_open_window`): a frame is
        the shortcut's while it ends at or before the window's limit."""
        pos = self.pos
        end = pos + self.n
        w = self._window
        if w is None or w[0] != self.i or end > w[3]:
            w = self._open_window()
            if w is None or end > w[3]:
                return None
        self.pos = end
        self.sample += self.n
        if copy:
            return w[2][pos:end].copy()
        self.view_at = (w[2], pos)
        return w[1][pos:end]

    def _open_window(self) -> tuple[int, Pcm16, Pcm16, int] | None:
        """The current Play's window from `pos` on: (step index, a read-only view of its
        audio, the audio, the last frame end the shortcut may reach: before the Play's last
        sample, its speech bounds and its marks). A slice of the view is read-only without
        setting a flag per frame. None: not a Play under way (or not int16 audio)."""
        i = self.i
        step = self.steps[i]
        if not isinstance(step, Play) or self.step_start_ns is None:
            return None
        pcm, pos = step.pcm, self.pos
        if pcm.dtype != np.int16:
            return None
        limits = [len(pcm) - 1]
        b = self._bounds.get(i)
        if b is not None and step.role == "turn":
            limits += [x for x in b if x >= pos]
        limits += [r.start for r in step.marks if r.start >= pos]
        old = self._window
        if old is not None and old[0] == i:
            view = old[1]
        else:
            view = pcm.view()
            view.flags.writeable = False
        w = (i, view, pcm, min(limits))
        self._window = w
        return w

    # --- steps ---------------------------------------------------------------------------

    def _start_play(self, step: Play, offset: int, marks: list[Mark]) -> None:
        b = self._bounds[self.i]
        start = self.sample
        rec = TurnRecord(
            len(self.turns),
            step.role,
            step.label,
            start,
            start + len(step.pcm),
            None if b is None else start + b[0],
            None if b is None else start + b[1],
        )
        self.turns.append(rec)
        if step.role == "turn":
            pass
        else:
            info = {
                "injection": step.role,
                "label": step.label,
                "turn": rec.index,
                "duration_ms": round(len(step.pcm) * 1000 / self.rate, 3),
            }
            marks.append(Mark("inject", offset, info))
        if step.barge_in and step.role != "prefill":
            self.barge_ins.append(start if b is None else start + b[0])

    def _advance(
        self, step: Step, obs: Observation, out: Pcm16, filled: int, marks: list[Mark]
    ) -> int:
        room = self.n - filled
        if isinstance(step, Play):
            chunk = step.pcm[self.pos : self.pos + room]
            out[filled : filled + len(chunk)] = chunk
            b = self._bounds.get(self.i)
            if b is not None and step.role == "turn":
                for kind, at in (("turn.start", b[0]), ("turn.end", b[1])):
                    end = self.pos + len(chunk)
                    inside = self.pos <= at < end
                    at_very_end = kind == "turn.end" and at == end == len(step.pcm)
                    if inside or at_very_end:
                        marks.append(
                            Mark(
                                kind,
                                filled + at - self.pos,
                                {"turn": self.turns[-1].index, "label": step.label},
                            )
                        )
            end = self.pos + len(chunk)
            for ref in step.marks:
                if self.pos <= ref.start < end or ref.start == end == len(step.pcm):
                    marks.append(Mark("mark", filled + ref.start - self.pos, {"ref": ref}))
            self.pos += len(chunk)
            return len(chunk)
        if isinstance(step, Pause):
            total = round(step.seconds * self.rate)
            take = min(room, total - self.pos)
            self.pos += take
            return take
        if isinstance(step, WaitOnset):
            target = self._onset_target(step, obs)
            if target is not None:
                at = self.timeline.sample_at(target)
                take = max(0, min(room, at - self.sample))
                self.pos += take
                return take
            return 0
        return 0  # WaitQuiet / Drain produce silence a frame at a time via the caller

    def _onset_target(self, step: WaitOnset, obs: Observation) -> int | None:
        if obs.onsets > self.onsets_at_step_start and obs.last_onset_ns is not None:
            return obs.last_onset_ns + round(step.offset_s * NS_PER_S)
        return None

    def _step_over(self, step: Step, obs: Observation) -> bool:
        assert self.step_start_ns is not None
        now = self.timeline.time_of(self.sample)
        waited = now - self.step_start_ns
        if isinstance(step, Play):
            if self.pos >= len(step.pcm):
                self.onsets_at_play_end = obs.onsets
                return True
            return False
        if isinstance(step, Pause):
            return self.pos >= round(step.seconds * self.rate)
        if isinstance(step, WaitOnset):
            target = self._onset_target(step, obs)
            if target is not None and self.sample >= self.timeline.sample_at(target):
                self._release = {"rule": "onset", "offset_s": step.offset_s, "target_ns": target}
                return True
            if waited >= step.timeout_s * NS_PER_S:
                self._release = {"rule": "onset", "timed_out": True}
                return True
            return False
        if isinstance(step, WaitQuiet | Drain):
            quiet_s = step.quiet_s
            limit_s = step.timeout_s if isinstance(step, WaitQuiet) else step.max_s
            spoke = obs.onsets > self.onsets_at_step_start or obs.system_busy
            if isinstance(step, Drain):
                return self._drain_over(step, obs, now, waited)
            quiet_since = obs.system_quiet_since_ns
            if spoke and not obs.system_busy:
                since = max(quiet_since or self.step_start_ns, self.step_start_ns)
                if now - since >= quiet_s * NS_PER_S:
                    self._release = {"rule": "quiet", "quiet_s": quiet_s}
                    return True
            if waited >= limit_s * NS_PER_S:
                self._release = {"rule": "quiet", "quiet_s": quiet_s, "timed_out": True}
                return True
            return False
        return True

    def _drain_over(self, step: Drain, obs: Observation, now: int, waited: int) -> bool:
        """Quiet for `quiet_s` (a drain needs quiet, not a new reply), or `quiet_s +
        wait_first_s` while the system has said nothing since the last Play; the cap."""
        assert self.step_start_ns is not None
        spoke = obs.onsets > self.onsets_at_play_end or obs.system_busy
        quiet_since = obs.system_quiet_since_ns
        since = max(quiet_since or self.step_start_ns, self.step_start_ns)
        need_s = step.quiet_s if spoke else step.quiet_s + step.wait_first_s
        info: dict[str, Any] = {"rule": "quiet", "quiet_s": step.quiet_s}
        if step.wait_first_s:
            info |= {"wait_first_s": step.wait_first_s, "spoke": spoke}
        if not obs.system_busy and now - since >= need_s * NS_PER_S:
            self._release = info
            return True
        if waited >= step.max_s * NS_PER_S:
            # cut while talking: audio still playing, or a gap shorter than the quiet rule
            recent = quiet_since is not None and now - quiet_since < step.quiet_s * NS_PER_S
            talking = obs.system_busy or (spoke and recent)
            self.censored = self.censored or talking
            self._release = info | {"timed_out": True, "censored": talking}
            return True
        return False

    def _end_step(self, step: Step, filled: int, marks: list[Mark]) -> None:
        release = self._release
        if isinstance(step, WaitQuiet | WaitOnset) and release:
            marks.append(Mark("release", filled, release))
        if isinstance(step, Drain) and release:
            marks.append(Mark("drain.end", filled, release))
        self._release = {}
        self.i += 1
        self.pos = 0
        self.step_start_ns = None


def steps_from_plan(pcm: Pcm16, turns: Sequence[Any], sample_rate: int) -> list[Step]:
    """A fixed plan (UserPlan) as steps: its turns as Plays, the gaps as Pauses."""
    steps: list[Step] = []
    pos = 0
    for t in turns:
        if t.start_sample > pos:
            steps.append(Pause((t.start_sample - pos) / sample_rate))
        steps.append(Play(pcm[t.start_sample : t.end_sample], t.label, "turn"))
        pos = t.end_sample
    if pos < len(pcm):
        steps.append(Pause((len(pcm) - pos) / sample_rate))
    return steps
