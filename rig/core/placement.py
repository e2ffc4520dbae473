"""Where system audio sits on the session timeline.

How this works: three placements of the same downlink chunks.
  arrival   the chunk starts where it arrived (chunks.jsonl `t_ns`)
  playback  a listener's queue: each chunk starts at max(arrival, end of the previous chunk),
            and what is still queued when the listener barges in is dropped (truncation):
            this is what a person at the rig would actually have heard
  server    on the server's clock through a fitted mapping (rig.clockfit.fit), for systems that
            stamp their audio and leave silent frames out

`PlaybackQueue` is the sans-I/O playback model. Positions are integer sample indices on the
session timeline (sample 0 = t0_ns) at the downlink rate. `release(now)` hands out audio
whose play time has come, so the writer records only what was played before a truncation.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rig.audio.pcm import Pcm16
from rig.core.timeline import Timeline


@dataclass(frozen=True, slots=True)
class Placed:
    start_sample: int
    pcm: Pcm16


class PlaybackQueue:
    """A listener's FIFO of system audio on the session timeline."""

    def __init__(self, t0_ns: int, sample_rate: int) -> None:
        self.timeline = Timeline(t0_ns, sample_rate)
        self.sample_rate = sample_rate
        self.end_sample = 0  # end of everything queued so far
        self.played_sample = 0  # everything before this has been released
        self._queue: deque[Placed] = deque()
        self.truncated_samples = 0

    def push(self, pcm: Pcm16, arrival_ns: int) -> int:
        """Queue a chunk that arrived at `arrival_ns`; returns its playback start sample."""
        start = max(self.timeline.sample_at(arrival_ns), self.end_sample, self.played_sample)
        if len(pcm):
            self._queue.append(Placed(start, pcm))
            self.end_sample = start + len(pcm)
        return start

    @property
    def queued_samples(self) -> int:
        return max(0, self.end_sample - self.played_sample)

    def busy_at(self, t_ns: int) -> bool:
        """Is the listener hearing (or still due to hear) system audio at `t_ns`?"""
        return self.timeline.sample_at(t_ns) < self.end_sample

    def release(self, now_ns: int) -> list[Placed]:
        """Audio whose play time is before `now_ns`, in order, split at `now_ns`."""
        now = self.timeline.sample_at(now_ns)
        out: list[Placed] = []
        while self._queue and self._queue[0].start_sample < now:
            head = self._queue[0]
            begin = max(head.start_sample, self.played_sample)
            end = head.start_sample + len(head.pcm)
            if end <= now:
                self._queue.popleft()
                out.append(Placed(begin, head.pcm[begin - head.start_sample :]))
                self.played_sample = end
            else:
                if now > begin:  # called twice at one instant: nothing new has played
                    piece = head.pcm[begin - head.start_sample : now - head.start_sample]
                    out.append(Placed(begin, piece))
                self.played_sample = now
                break
        return out

    def truncate(self, now_ns: int) -> tuple[list[Placed], int]:
        """The listener barged in at `now_ns`: play up to it, drop the rest.

        Returns (audio played up to `now_ns` not yet released, samples dropped).
        """
        released = self.release(now_ns)
        dropped = 0
        for i, placed in enumerate(self._queue):
            begin = max(placed.start_sample, self.played_sample) if i == 0 else placed.start_sample
            dropped += placed.start_sample + len(placed.pcm) - begin
        self._queue.clear()
        if dropped:
            self.end_sample = self.played_sample
        self.truncated_samples += dropped
        return released, dropped
