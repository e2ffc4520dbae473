from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from rig.core.pacer import Pacer, PacerConfig


def test_no_drift_over_a_million_frames() -> None:
    cfg = PacerConfig.from_ms(16_000, 20.0)
    p = Pacer(cfg, t0_ns=123_456_789)
    t = p.t0_ns
    for _ in range(1_000_000):
        d = p.next_deadline_ns
        late, stall = p.record(d + 37)  # always 37 ns late, never more
        assert late == 37 and not stall
        t = d
    # frame 10^6 - 1 is due exactly (10^6 - 1) * 20 ms after t0: zero cumulative drift
    assert t - p.t0_ns == (1_000_000 - 1) * 20_000_000
    assert p.max_lateness_ns == 37


@given(
    rate=st.sampled_from([8_000, 11_025, 16_000, 22_050, 24_000, 44_100, 48_000]),
    frame_ms=st.sampled_from([10.0, 20.0, 30.0, 40.0, 80.0]),
    k=st.integers(min_value=0, max_value=10**9),
)
def test_deadline_is_the_exact_instant_floored(rate: int, frame_ms: float, k: int) -> None:
    cfg = PacerConfig.from_ms(rate, frame_ms)
    p = Pacer(cfg, t0_ns=5)
    exact = 5 + Fraction(k * cfg.frame_samples * 10**9, rate)
    assert 0 <= exact - p.deadline_ns(k) < 1
    assert p.deadline_ns(k + 1) > p.deadline_ns(k)


def test_stall_is_more_than_one_frame_late() -> None:
    p = Pacer(PacerConfig.from_ms(16_000, 20.0), t0_ns=0)
    _, stall = p.record(20_000_000)  # exactly one frame late: not a stall
    assert not stall
    _, stall = p.record(20_000_000 + 20_000_001)  # frame 1 due at 20 ms, sent 20 ms + 1 ns late
    assert stall
    assert p.stalls == 1


def test_skip_to_counts_due_frames() -> None:
    p = Pacer(PacerConfig.from_ms(16_000, 20.0), t0_ns=0)
    assert p.skip_to(0) == 1
    assert p.skip_to(100_000_000) == 6


@given(
    rate=st.sampled_from([16_000, 24_000, 44_100, 48_000]),
    fast=st.integers(min_value=1, max_value=10_000),
    speed=st.sampled_from([1.5, 2.0, 4.0, 10.0, 37.5]),
    k=st.integers(min_value=0, max_value=10**7),
)
def test_fast_prefill_frames_then_real_time_on_the_same_timeline(
    rate: int, fast: int, speed: float, k: int
) -> None:
    cfg = PacerConfig.from_ms(rate, 20.0)
    head = Pacer.head_start_ns(cfg, fast, speed)
    p = Pacer(cfg, t0_ns=10**12 - head, fast_frames=fast, speed=speed)
    assert abs(p.deadline_ns(0) - 10**12) <= 1  # the first frame goes out "now"
    # live frames are exactly where they would be without the prefill: no drift from it
    live = fast + k
    assert p.deadline_ns(live) == p.timeline.time_of(live * cfg.frame_samples)
    # fast frames are 1/speed of a frame apart, and the last one leads into the first live one
    gap = cfg.frame_ns / speed
    j = k % fast
    assert abs(p.deadline_ns(j + 1) - p.deadline_ns(j) - gap) <= 1
    assert abs(p.deadline_ns(fast) - p.deadline_ns(fast - 1) - gap) <= 1


def test_no_fast_frames_at_real_time_speed() -> None:
    cfg = PacerConfig.from_ms(16_000, 20.0)
    p = Pacer(cfg, t0_ns=0, fast_frames=100, speed=1.0)
    assert p.fast_frames == 0 and p.deadline_ns(1) == 20_000_000
    assert Pacer.head_start_ns(cfg, 100, 1.0) == 0
