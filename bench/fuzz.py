"""Fuzz every decoder and file reader: N inputs per target, exceptions counted by type.

The targets, seeds and mutator are tests/support/fuzzing.py (the suite runs the same ones
with hypothesis, a few hundred examples each). Two generators per target: mutated seeds
(byte flips, truncation, hostile JSON tokens spliced in) and, for JSON decoders, random JSON
documents (deep nesting, huge ints, NaN/inf, markup) in each protocol's envelope. Prints,
per target: inputs tried, accepted, refused with the documented error type(s), and any other
exception type with a count and a first example. Exit status 1 if any undocumented type
was seen.

    python bench/fuzz.py [--n 10000] [--seed 1] [--only NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.fuzzing import (  # noqa: E402 - after the path tweak
    Target,
    all_targets,
    message_frame_raw,
    random_input,
)

HOSTILE_STRINGS = ["[/]", "[bold]x", "\x00", "\ud800", "a\n", "../../x", "x" * 300]


def random_json(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 6 or r < 0.45:
        return rng.choice(
            [
                None,
                True,
                rng.randint(-(2**70), 2**70),
                rng.choice([0, 1, -1, 8_000, 16_000, 20_000_000, 4_000_000_000]),
                rng.uniform(-1e6, 1e6),
                rng.choice([float("nan"), float("inf"), -float("inf"), 1e308, 1e-308]),
                rng.choice(HOSTILE_STRINGS),
                rng.randbytes(rng.randint(0, 8)).decode("latin-1"),
            ]
        )
    if r < 0.7:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["type", "sample_rate", "server_ts_ms", "delta", "data", "v", "kind", "t_ns", "id"]
    return {
        rng.choice(keys + [rng.choice(HOSTILE_STRINGS)]): random_json(rng, depth + 1)
        for _ in range(rng.randint(0, 5))
    }


ENVELOPES = [
    lambda v: {"type": "ready", "sample_rate": v},
    lambda v: {"type": "speech_started", "server_ts_ms": v},
    lambda v: {"type": "probe_reply", "id": 1, "t0_ns": 1, "t1_server_ns": v, "t2_server_ns": v},
    lambda v: {"type": "response.output_audio.delta", "item_id": "i", "delta": v},
    lambda v: {"type": "input_audio_buffer.speech_started", "audio_start_ms": v},
    lambda v: {"type": "ping", "timestamp": v},
    lambda v: {"serverContent": {"modelTurn": {"parts": [{"inlineData": v}]}}},
    lambda v: {"v": 1, "kind": "chunk_batch", "run": "r", "rollout": "x", "t_ns": 1, "data": v},
    lambda v: {"v": 1, "kind": "status", "run": "r", "rollout": "x", "t_ns": 1, "data": v},
    lambda v: {"v": 1, "id": 0, "t0_ns": 5, "t1_ns": v, "t2_ns": v},
    lambda v: v,
]


def json_input(rng: random.Random, target: Target) -> str | bytes:
    doc = rng.choice(ENVELOPES)(random_json(rng))
    text = json.dumps(doc, allow_nan=True)
    if rng.random() < 0.05:
        text = "[" * rng.randint(100, 5000) + text
    if target.name == "dialect:pipecat":
        return message_frame_raw(text)
    return text.encode() if rng.random() < 0.3 else text


def fuzz(target: Target, n: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{target.name}")
    use_json = not target.name.startswith(("file:read_track", "file:read_wav", "rig:decode_audio"))
    accepted = 0
    documented: collections.Counter[str] = collections.Counter()
    other: collections.Counter[str] = collections.Counter()
    first: dict[str, str] = {}
    t0 = time.perf_counter()
    for i in range(n):
        data = json_input(rng, target) if use_json and i % 2 else random_input(rng, target.seeds)
        try:
            target.run(data)
            accepted += 1
        except target.allowed as exc:
            documented[type(exc).__name__] += 1
        except Exception as exc:  # noqa: BLE001 - counted: the point of the exercise
            name = type(exc).__name__
            other[name] += 1
            first.setdefault(name, f"{str(exc)[:120]} <- {data[:120]!r}")
    return {
        "target": target.name,
        "inputs": n,
        "accepted": accepted,
        "documented_errors": dict(documented),
        "other_errors": dict(other),
        "first_other": first,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="inputs per target (default 10^4)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="run the targets whose name contains this")
    ap.add_argument("--json", help="write the results as JSON here")
    args = ap.parse_args()
    targets = [t for t in all_targets() if not args.only or args.only in t.name]
    load = os.getloadavg()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {load[0]:.2f} {load[1]:.2f}; "
        f"n={args.n} per target, seed {args.seed}"
    )
    print(f"{'target':24} {'inputs':>7} {'accepted':>8}  documented errors | other")
    results = []
    for target in targets:
        r = fuzz(target, args.n, args.seed)
        results.append(r)
        documented = ", ".join(f"{k} {v}" for k, v in sorted(r["documented_errors"].items()))
        other = ", ".join(f"{k} {v}" for k, v in sorted(r["other_errors"].items())) or "none"
        print(
            f"{r['target']:24} {r['inputs']:>7} {r['accepted']:>8}  {documented or '-'} | {other}"
        )
        for name, example in r["first_other"].items():
            print(f"    first {name}: {example}")
    bad = sum(sum(r["other_errors"].values()) for r in results)
    print(f"# {len(results)} targets, {sum(r['inputs'] for r in results)} inputs, "
          f"{bad} undocumented exceptions")  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"load": load, "results": results}, f, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
