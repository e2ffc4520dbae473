"""Speech on/off per track for the live view, and its activity strip (pure).

How this works: a track says it is speaking when an `activity` event says so. No session
publishes those today, so the view also reads speech from the chunk levels it already gets:
a chunk at or above `SPEECH_DBFS` (the onset threshold sessions use) turns speech on, and
`HANGOVER_NS` without one turns it off again (also when chunks stop coming: the off time is
the last loud chunk plus the hangover, however late the view looks). Once a track has had an
explicit `activity` event, its levels no longer decide. Costs the audio loop nothing: this
runs where the view runs.
"""

from __future__ import annotations

from typing import Any, Protocol

from rig.core.units import NS_PER_MS

SPEECH_DBFS = -40.0  # rig.core.sessionconfig's onset_threshold_dbfs default
HANGOVER_NS = 300 * NS_PER_MS  # its onset_gap_ms: a pause shorter than this is one turn


class SpeechTrack(Protocol):
    speech: bool
    transitions: Any  # deque[tuple[int, bool]]
    last_loud_ns: int | None
    explicit: bool


def gate_level(track: SpeechTrack, t_ns: int, level_dbfs: float) -> None:
    """Fold one chunk level into the track's speech state (unless activity events drive it)."""
    if track.explicit:
        return
    if level_dbfs >= SPEECH_DBFS:
        if not speaking(track, t_ns):
            if track.speech and track.last_loud_ns is not None:  # the gap closed it already
                track.transitions.append((track.last_loud_ns + HANGOVER_NS, False))
            track.speech = True
            track.transitions.append((t_ns, True))
        track.last_loud_ns = t_ns
    elif track.speech and not speaking(track, t_ns):
        track.speech = False
        assert track.last_loud_ns is not None
        track.transitions.append((track.last_loud_ns + HANGOVER_NS, False))


def speaking(track: SpeechTrack, now_ns: int) -> bool:
    """Is the track speaking at `now_ns` (a level-driven track goes quiet after the hangover,
    even with no chunk to say so)?"""
    if not track.speech:
        return False
    if track.explicit or track.last_loud_ns is None:
        return True
    return now_ns - track.last_loud_ns < HANGOVER_NS


def strip(track: SpeechTrack, now_ns: int, span_ns: int, n: int) -> tuple[bool, ...]:
    """Speech activity per cell over the last `span_ns`, oldest cell first."""
    cell_ns = span_ns // n
    start = now_ns - span_ns
    cells = [False] * n
    # Walk the transitions, painting each speech interval [on, off) that overlaps the span.
    on_since: int | None = None
    trans = list(track.transitions)
    # speech state before the first remembered transition: the opposite of its value
    if trans and not trans[0][1]:
        on_since = start
    for t, speech in trans:
        if t > now_ns:
            break
        if speech and on_since is None:
            on_since = t
        elif not speech and on_since is not None:
            _paint(cells, on_since, t, start, cell_ns)
            on_since = None
    if on_since is not None:
        end = now_ns + 1
        if not speaking(track, now_ns) and track.last_loud_ns is not None:
            end = min(end, track.last_loud_ns + HANGOVER_NS)
        _paint(cells, on_since, end, start, cell_ns)
    return tuple(cells)


def _paint(cells: list[bool], t_on: int, t_off: int, start: int, cell_ns: int) -> None:
    n = len(cells)
    a = max(0, (t_on - start) // cell_ns)
    b = min(n - 1, (t_off - 1 - start) // cell_ns)
    for i in range(int(a), int(b) + 1):
        cells[i] = True
