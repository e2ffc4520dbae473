"""Stream phases: near-evenly spread over the frame period, on shared slots."""

from __future__ import annotations

from rig.runs.phases import PHASE_SLOTS, phase_of


def test_the_first_streams_halve_the_gaps_between_earlier_ones() -> None:
    assert [phase_of(k) for k in range(4)] == [0.0, 0.5, 0.25, 0.75]


def test_phases_lie_on_slots_inside_the_period_and_fill_every_slot() -> None:
    phases = [phase_of(k) for k in range(200)]
    assert all(0.0 <= p < 1.0 for p in phases)
    slots = [round(p * PHASE_SLOTS) for p in phases]
    assert all(abs(p * PHASE_SLOTS - s) < 1e-9 for p, s in zip(phases, slots, strict=True))
    # 200 streams on 20 slots: near-evenly, 10 per slot give or take one, none crowded
    per_slot = [slots.count(s) for s in range(PHASE_SLOTS)]
    assert min(per_slot) >= 9 and max(per_slot) <= 11
