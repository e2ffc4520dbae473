"""Conditions for a whole suite: each turn rendered once, before any audio streams.

`apply_conditions(items, run, seed)` merges the run's condition (`rig run --condition`),
each item's and each step's (rig.conditions.spec.merge), renders every conditioned turn
(rig.conditions.render) and hangs the result on the item's plan as `plan.conditions`: a
`ConditionPlan`, which the session turns into the uplink frame hook (rig.conditions.hook)
and which describes itself into the item's meta (so into the manifest and metrics.json).

Noise positions: the noise runs with the session timeline. A turn's noise position is the
item's noise offset (the file's `start_s`, or a seeded offset into a generated loop) plus
where the turn would start if every wait took no time (its *nominal* start), so a script
of turns and pauses hears one continuous noise; after a release that waited, the bed
switches to the next turn's noise with a short crossfade before its speech (hook).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.conditions.hook import ConditionPlan, PlayConditions
from rig.conditions.noise import NoiseCache, rng
from rig.conditions.render import ConditionError, render_turn
from rig.conditions.spec import LEVEL_KEYS, Condition, merge
from rig.core.director import Pause, Play
from rig.core.plan import UserPlan, speech_bounds
from rig.errors import ScenarioError
from rig.extras import require

FADE_S = 0.01


@dataclass(frozen=True, slots=True)
class Where:
    """Where a condition was set, for errors: the file (or `--condition`) and the field."""

    source: str
    field: str


@dataclass(frozen=True, slots=True)
class PlayInfo:
    pcm: Pcm16
    role: str
    label: str
    nominal_start: int


def plays_of(plan: UserPlan) -> list[PlayInfo]:
    """Every Play of a plan in order, with its nominal start (waits taking no time)."""
    rate = plan.sample_rate
    if plan.steps is None:
        return [
            PlayInfo(plan.pcm[t.start_sample : t.end_sample], "turn", t.label, t.start_sample)
            for t in plan.turns
        ]
    out, pos = [], 0
    for step in plan.steps:
        if isinstance(step, Pause):
            pos += round(step.seconds * rate)
        elif isinstance(step, Play):
            out.append(PlayInfo(step.pcm, step.role, step.label, pos))
            pos += len(step.pcm)
    return out


def _needs(cond: Condition) -> None:
    """The one-line error naming the extra, before any audio is rendered."""
    if cond.level is not None and cond.level[0] == "target_lufs":
        require("conditions", "condition target_lufs")
    if cond.noise is not None and cond.noise.kind == "pink":
        require("conditions", 'condition noise kind = "pink"')
    if cond.line is not None and cond.line.kind == "phone":
        require("conditions", 'condition line = "phone"')


def apply_conditions(items: Sequence[Any], run: Condition | None = None, seed: int = 0) -> None:
    """Render every conditioned turn of `items` (rig.scenarios.ScenarioItem) in place."""
    if not items:
        return
    rate = items[0].plan.sample_rate
    cache = NoiseCache(rate, seed)
    all_plays = [plays_of(it.plan) for it in items]
    for i, item in enumerate(items):
        layers = list(getattr(item, "play_conditions", None) or [])
        item_cond = getattr(item, "condition", None)
        plays = all_plays[i]
        item_layer = item_cond[0] if item_cond else None
        conds = [
            Condition()
            if p.role == "prefill"
            else merge(run, item_layer, layers[k][0] if k < len(layers) and layers[k] else None)
            for k, p in enumerate(plays)
        ]
        if all(c.empty for c in conds):
            continue
        for c in conds:
            _needs(c)
        wheres = [
            _where(run, item_cond, layers[k] if k < len(layers) else None)
            for k in range(len(plays))
        ]
        others = [
            p.pcm
            for j, ps in enumerate(all_plays)
            if j != i
            for p in ps
            if p.role != "prefill" and not any(np.array_equal(p.pcm, q.pcm) for q in plays)
        ]
        item.plan.conditions = _item_plan(
            item.item_id, plays, conds, wheres, cache, others, rate, seed, run
        )
        item.meta["conditions"] = item.plan.conditions.describe()


def _where(run: Condition | None, item: Any, step: Any) -> dict[str, Where]:
    """Per part (level, noise, line): where the innermost layer that sets it came from."""
    out: dict[str, Where] = {}
    layers = [(run, Where("--condition", "condition"))]
    if item:
        layers.append((item[0], Where(item[1], item[2])))
    if step:
        layers.append((step[0], Where(step[1], step[2])))
    for cond, where in layers:
        if cond is None:
            continue
        if cond.level is not None:
            out["level"] = Where(where.source, f"{where.field}.{cond.level[0]}")
        if cond.noise is not None:
            out["noise"] = Where(where.source, f"{where.field}.noise")
        if cond.line is not None:
            out["line"] = Where(where.source, f"{where.field}.line")
    return out


def _item_plan(
    item_id: str,
    plays: list[PlayInfo],
    conds: list[Condition],
    wheres: list[dict[str, Where]],
    cache: NoiseCache,
    others: list[Pcm16],
    rate: int,
    seed: int,
    run: Condition | None,
) -> ConditionPlan:
    out: list[PlayConditions | None] = []
    records: list[dict[str, Any]] = []
    turn = -1  # the user turn a play is (the timing analysis numbers turns alone)
    for k, (p, cond) in enumerate(zip(plays, conds, strict=True)):
        turn += p.role == "turn"
        if cond.empty:
            out.append(None)
            continue
        span = speech_bounds(p.pcm, rate) or (0, len(p.pcm))
        loop, base = None, 0
        if cond.noise is not None:
            where = wheres[k]["noise"]
            try:
                loop = cache.loop(cond.noise.kind, cond.noise.file, item_id, others)
            except ValueError as exc:
                raise ScenarioError(where.source, str(exc), where.field) from None
            if cond.noise.file is not None:
                base = round(cond.noise.start_s * rate)
            else:
                base = int(rng(seed, item_id, "noise", cond.noise.kind).integers(loop.size))
        loss_gen = None
        if cond.line is not None and cond.line.kind == "lossy":
            loss_gen = rng(cond.line.seed if cond.line.seed is not None else seed, item_id, k)
        try:
            r = render_turn(
                p.pcm, span, cond, rate,
                loop=loop, noise_pos=base + p.nominal_start, loss_gen=loss_gen,
            )  # fmt: skip
        except ConditionError as exc:
            part = "level" if cond.level is not None else "noise"
            where = wheres[k].get(part) or Where("--condition", "condition")
            raise ScenarioError(where.source, f"{p.role} {p.label!r}: {exc}", where.field) from None
        fade = min(round(FADE_S * rate), span[0])
        pc = PlayConditions(r.pcm, r.bed, base + p.nominal_start, fade)
        out.append(pc)
        records.append(
            {
                "play": k,
                "turn": turn if p.role == "turn" else None,
                "role": p.role,
                "label": p.label,
                **r.result,
            }
        )
    # before the first live play: its noise (a room is noisy before anyone speaks)
    live = next((k for k, p in enumerate(plays) if p.role != "prefill"), None)
    first = out[live] if live is not None else None
    pre_bed = first.bed if first is not None else None
    pre_pos = (
        first.noise_pos - plays[live].nominal_start if first is not None and live is not None else 0
    )
    return ConditionPlan(
        rate,
        out,
        pre_bed,
        pre_pos,
        records,
        run.as_dict() if run is not None else {},
    )


__all__ = ["LEVEL_KEYS", "ConditionPlan", "apply_conditions", "plays_of"]
