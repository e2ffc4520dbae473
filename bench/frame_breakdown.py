"""Per-frame CPU breakdown of a WebSocket fleet from a py-spy profile (docs/pacing.md).

    py-spy record --gil -r 250 --threads -f raw -o prof.txt -- \
        python bench/capacity.py --steps 50 --echo-steps 1 --seconds 8 --no-stop
    python bench/frame_breakdown.py prof.txt 237.3    # the step's rig_us_per_frame

Each sample goes to the first rule whose key appears in its stack (file:line parts dropped);
a row is its share of the samples times the measured rig CPU per uplink frame. The bench's
own analysis after the run is left out. Sampling error: ~sqrt(p(1-p)/n) of the total per row.
"""

from __future__ import annotations

import argparse
import collections
import math
import re

BENCH_ONLY = "bench only (after the measured window)"
RULES: list[tuple[str, list[str]]] = [
    (BENCH_ONLY, ["uplink_lateness_ms", "TemporaryDirectory", "echo_step", "start_proc"]),
    ("writer thread (JSON lines, WAV appends, flushes)", ["RecordingWriter._run"]),
    (
        "transport send (dialect encode, websockets framing + mask, socket write)",
        ["WebSocketTransport.send_audio", "WebSocketTransport.send_event"],
    ),
    (
        "uplink frame building (director, pacer, observation)",
        ["Uplink.next_frame", "Listener.observe"],
    ),
    (
        "uplink records (lateness, level, ChunkRecord) + sink puts",
        ["Uplink.sent", "_send_loop;RolloutSink", "Listener.release", "Link.emit"],
    ),
    ("timer wake-ups (timerfd, futures, sleep_until)", ["PreciseTimer", "sleep_until"]),
    ("receive: websockets recv + dialect decode + answers", ["WebSocketTransport.receive"]),
    ("receive: placement, levels, onsets, records", ["Listener.on_audio", "Listener.on_event"]),
    ("receive: sink puts", ["receive_loop;RolloutSink"]),
    ("socket reads + websockets frame parsing (loop callback)", ["_read_ready"]),
    ("probes, path samples, loop watch", ["probe_loop", "path_loop", "LoopWatch", "PathSampler"]),
    ("session loops' own lines", ["Session._send_loop", "Link.receive_loop"]),
    ("event loop: selector + task switching", ["EpollSelector.select", "_run_once"]),
    ("per rollout: imports, connect, end of rollout, runner", [""]),
]


def breakdown(path: str) -> tuple[collections.Counter[str], int]:
    counts: collections.Counter[str] = collections.Counter()
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            stack = re.sub(r" \([^;]*\)", "", stack)
            for name, keys in RULES:
                if any(k in stack for k in keys):
                    counts[name] += int(n)
                    break
    bench = counts.pop(BENCH_ONLY, 0)
    return counts, bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile", help="py-spy raw (collapsed) output")
    ap.add_argument("us_per_frame", type=float, help="the run's rig CPU per uplink frame")
    args = ap.parse_args()
    counts, bench = breakdown(args.profile)
    total = sum(counts.values())
    err = math.sqrt(0.1 * 0.9 / total) * args.us_per_frame if total else math.nan
    print(f"{total} samples ({bench} bench-only left out); a 10 % row is +-{err:.0f} us (1 sigma)")
    print("| where | share | us/frame |\n|---|---|---|")
    for name, _ in RULES[1:]:
        n = counts.get(name, 0)
        print(f"| {name} | {n / total * 100:.1f} % | {n / total * args.us_per_frame:.0f} |")


if __name__ == "__main__":
    main()
