"""The play queue shared by the loop thread and PortAudio's callback thread."""

from __future__ import annotations

import numpy as np

from rig.device.callbacks import Playout


def test_each_thread_writes_only_its_own_counter() -> None:
    q = Playout()
    q.push(np.arange(1, 101, dtype=np.int16))
    q.push(np.arange(101, 151, dtype=np.int16))
    out = np.empty((120, 2), np.int16)
    assert q.fill(out) == 120  # the callback side: copies into every channel
    assert (out[:, 0] == np.arange(1, 121)).all() and (out[:, 1] == out[:, 0]).all()
    assert (q.pushed_frames, q.taken_frames, q.queued_frames) == (150, 120, 30)
    assert q.fill(out) == 30 and (out[30:] == 0).all()  # silence after the queue runs dry
    assert q.queued_frames == 0
