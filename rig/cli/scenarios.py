"""`rig scenarios [SPEC]`: the built-in suites and their items (or those of a file)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rig.scenarios import ScenarioItem


def add_parser(sub: Any) -> None:
    p = sub.add_parser("scenarios", help="list built-in suites and their items")
    p.add_argument("spec", nargs="?", help="builtin:NAME or a scenario file: show its items")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--sample-rate", type=int, default=16_000, help="rate the audio is decoded at, Hz"
    )


def _summary(items: list[ScenarioItem]) -> list[dict[str, Any]]:
    from rig.core.plan import describe_step

    out = []
    for it in items:
        steps = [describe_step(s, it.plan.sample_rate) for s in it.plan.steps or []]
        out.append(
            {
                "item": it.item_id,
                "kind": it.meta.get("kind"),
                "description": it.meta.get("description", ""),
                "max_s": it.session.get("max_s"),
                "steps": steps,
                "turns": len(it.plan.turns),
                "duration_s": round(it.plan.duration_s, 3),
            }
        )
    return out


def _step_text(s: dict[str, Any]) -> str:
    t = s["type"]
    if t == "Play":
        return f"{s['role']}:{s['label']}({s['duration_s']:.1f}s)"
    if t == "Pause":
        return f"pause {s['seconds']:g}s"
    if t == "WaitOnset":
        return f"at reply+{s['offset_s']:g}s"
    if t == "WaitQuiet":
        return f"release quiet {s['quiet_s']:g}s"
    if t == "Drain":
        return f"drain {s['quiet_s']:g}s≤{s['max_s']:g}s"
    return str(t)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from rig.scenarios import resolve
    from rig.scenarios.builtin import BUILTINS, DESCRIPTIONS

    specs = [args.spec] if args.spec else [f"builtin:{name}" for name in BUILTINS]
    data = {spec: _summary(resolve(spec, args.sample_rate)) for spec in specs}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    console = Console()
    for spec, items in data.items():
        name = spec.removeprefix("builtin:")
        title = f"{spec}: {DESCRIPTIONS.get(name, '')}".rstrip(": ")
        t = Table(title=title, title_justify="left")
        for col in ("item", "kind", "script"):
            t.add_column(col)
        for it in items:
            script = " → ".join(_step_text(s) for s in it["steps"]) or (
                f"fixed plan: {it['turns']} turn(s), {it['duration_s']:g}s, then drain"
            )
            t.add_row(it["item"], str(it["kind"] or "-"), script)
        console.print(t)
    return 0
