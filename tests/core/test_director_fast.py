"""The director's shortcut for frames inside a Play gives exactly the general path's frames."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.audio.source import tone
from rig.core.director import Director, Observation, Pause, Play, Step, WaitQuiet
from rig.core.refmarks import RefMark

RATE = 16_000


@st.composite
def scripts(draw: st.DrawFn) -> list[Step]:
    steps: list[Step] = []
    for k in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["turn", "quiet_turn", "inject", "pause", "wait"]))
        n = draw(st.integers(1, 3000))
        if kind == "pause":
            steps.append(Pause(n / RATE))
        elif kind == "wait":
            steps.append(WaitQuiet(0.01, timeout_s=n / RATE))
        else:
            pcm = tone(300, n / RATE, RATE).pcm[:n]
            if kind == "quiet_turn":
                pcm = (pcm // 1000).astype(np.int16)  # below the speech threshold: no bounds
            lead = draw(st.integers(0, 400))  # silence before speech: bounds inside the turn
            pcm = np.concatenate([np.zeros(lead, np.int16), pcm])
            role = "interruption" if kind == "inject" else "turn"
            # reference marks anywhere in the audio: the shortcut must stop at each
            starts = draw(st.lists(st.integers(0, len(pcm) - 1), max_size=4))
            marks = tuple(RefMark("m", x, label=f"m{j}") for j, x in enumerate(sorted(starts)))
            steps.append(Play(pcm, f"s{k}", role, marks=marks))
    return steps


@settings(max_examples=150, deadline=None)
@given(script=scripts(), frame=st.sampled_from([80, 160, 320, 480, 960]))
def test_shortcut_frames_equal_the_general_path(script: list[Step], frame: int) -> None:
    fast = Director(script, RATE, frame, 10**9)
    slow = Director(script, RATE, frame, 10**9)
    slow.fast_play = False
    for _ in range(10_000):
        obs = Observation(fast.timeline.time_of(fast.sample), False, None, None, 0)
        a, b = fast.next_frame(obs), slow.next_frame(obs)
        if a is None or b is None:
            assert a is None and b is None
            break
        assert a[0].dtype == b[0].dtype == np.int16
        assert np.array_equal(a[0], b[0])
        assert a[1] == b[1]
        assert (fast.i, fast.pos, fast.sample) == (slow.i, slow.pos, slow.sample)
    assert fast.turns == slow.turns and fast.barge_ins == slow.barge_ins


def test_the_shortcut_is_taken_inside_a_long_turn() -> None:
    d = Director([Play(tone(300, 1.0, RATE).pcm, "t")], RATE, 320, 0)
    d.next_frame(Observation(0, False, None, None, 0))  # starts the step (general path)
    assert d._inside_play() is not None


def test_the_plain_path_gets_a_read_only_view_and_hooks_a_copy() -> None:
    """No hooks on the plain path (Uplink.plain_pcm): a view of the step's samples, no
    allocation per frame, read-only so nothing can change the plan through it; the general
    path's frames go through hooks that may change them in place: those stay copies."""
    pcm = tone(300, 1.0, RATE).pcm
    d = Director([Play(pcm, "t")], RATE, 320, 0)
    d.next_frame(Observation(0, False, None, None, 0))  # starts the step (general path)
    view = d._inside_play(copy=False)
    assert view is not None and np.shares_memory(view, pcm) and not view.flags.writeable
    assert np.array_equal(view, pcm[320:640])
    try:
        view[0] = 1
    except ValueError:
        pass
    else:
        raise AssertionError("the plan's samples were writable through a frame")
    copy = d._inside_play()
    assert copy is not None and copy.base is None and copy.flags.writeable
    copy[:] = 0  # a hook changing its frame leaves the plan alone
    assert np.array_equal(pcm[640:960], tone(300, 1.0, RATE).pcm[640:960])


def test_the_shortcut_stops_at_a_mark_and_takes_up_after_it() -> None:
    """A reference mark inside a turn: the frame holding it takes the general path (its
    mark), the frames before and after it the shortcut; the window is opened once per
    stretch, not per frame."""
    pcm = tone(300, 1.0, RATE).pcm
    d = Director([Play(pcm, "t", marks=(RefMark("m", 3200 + 5),))], RATE, 320, 0)
    obs = Observation(0, False, None, None, 0)
    d.next_frame(obs)  # starts the step
    taken = [d._inside_play(copy=False) is not None for _ in range(9)]
    assert taken == [True] * 9 and d.pos == 3200
    assert d._inside_play(copy=False) is None  # frame 3200..3520 holds the mark
    frame = d.next_frame(obs)
    assert frame is not None and [m.kind for m in frame[1]] == ["mark"]
    window = d._window
    assert d._inside_play(copy=False) is not None  # past the mark: a new window
    assert d.view_at is not None and d.view_at[0] is pcm and d.view_at[1] == 3520
    assert d._window is not window and d._window is not None
    reopened = d._window
    assert d._inside_play(copy=False) is not None and d._window is reopened
    bounds = d._bounds[0]
    assert bounds is not None and reopened[3] == min(bounds[1], len(pcm) - 1)
