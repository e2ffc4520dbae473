import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rig.core.placement import PlaybackQueue


@given(
    st.lists(
        st.tuples(st.integers(0, 5_000_000_000), st.integers(1, 4000)), min_size=1, max_size=40
    )
)
def test_playback_is_monotone_gapless_and_never_before_arrival(
    chunks: list[tuple[int, int]],
) -> None:
    q = PlaybackQueue(t0_ns=0, sample_rate=16_000)
    prev_end = 0
    for arrival, n in sorted(chunks):
        start = q.push(np.ones(n, np.int16), arrival)
        assert start >= prev_end  # no overlap, order kept
        assert (
            q.timeline.time_of(start) >= arrival - 62_500
        )  # never earlier than it arrived (1 sample)
        prev_end = start + n
    released = q.release(10**12)
    total = sum(len(p.pcm) for p in released)
    assert total == sum(n for _, n in chunks)
    for a, b in zip(released, released[1:], strict=False):
        assert a.start_sample + len(a.pcm) <= b.start_sample


def test_faster_than_real_time_burst_queues_back_to_back() -> None:
    q = PlaybackQueue(t0_ns=0, sample_rate=1000)
    starts = [q.push(np.ones(100, np.int16), 1_000_000_000) for _ in range(5)]  # all at 1 s
    assert starts == [1000, 1100, 1200, 1300, 1400]


def test_release_splits_at_now_and_truncate_drops_unplayed() -> None:
    q = PlaybackQueue(t0_ns=0, sample_rate=1000)
    q.push(np.arange(1, 501, dtype=np.int16), 0)  # plays 0..500 ms
    part = q.release(200_000_000)
    assert [(p.start_sample, len(p.pcm)) for p in part] == [(0, 200)]
    released, dropped = q.truncate(300_000_000)
    assert [(p.start_sample, len(p.pcm)) for p in released] == [(200, 100)]
    assert dropped == 200
    assert q.truncated_samples == 200
    assert not q.busy_at(300_000_000)
    # audio after the barge-in starts where it arrives
    assert q.push(np.ones(10, np.int16), 400_000_000) == 400


def test_release_twice_at_one_instant_hands_out_nothing_new() -> None:
    q = PlaybackQueue(t0_ns=0, sample_rate=1000)
    q.push(np.ones(500, np.int16), 0)
    assert [len(p.pcm) for p in q.release(200_000_000)] == [200]
    assert q.release(200_000_000) == []  # not an empty piece
    assert [len(p.pcm) for p in q.release(300_000_000)] == [100]
