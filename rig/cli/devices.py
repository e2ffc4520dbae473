"""`rig devices`: sound devices, their host APIs, channels, default rates and latencies."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rig.extras import BACKENDS, require


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "devices", help="list audio devices", description="List PortAudio devices and host APIs."
    )
    p.add_argument(
        "--backend", choices=sorted(BACKENDS), default="sounddevice", help="PortAudio binding"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    require(BACKENDS[args.backend], f"rig devices --backend {args.backend}")
    from rig.device.stream import get_backend

    backend = get_backend(args.backend)
    apis = backend.hostapis()
    devices = backend.devices()
    if args.json:
        print(
            json.dumps(
                {
                    "backend": backend.name,
                    "hostapis": [
                        {
                            "index": h.index,
                            "name": h.name,
                            "default_input": h.default_input,
                            "default_output": h.default_output,
                        }
                        for h in apis
                    ],
                    "devices": [d.as_dict() for d in devices],
                },
                indent=2,
            )
        )
        return 0
    print(f"host APIs ({backend.name}): " + ", ".join(h.name for h in apis))
    header = (
        f"{'#':>3}  {'name':<28} {'host API':<27} {'in':>3} {'out':>3} {'rate':>6}  "
        "latency in / out ms (low-high)"
    )
    print(header)
    for d in devices:
        lat_in = (
            f"{d.low_input_latency_s * 1e3:.1f}-{d.high_input_latency_s * 1e3:.1f}"
            if d.max_input_channels
            else "-"
        )
        lat_out = (
            f"{d.low_output_latency_s * 1e3:.1f}-{d.high_output_latency_s * 1e3:.1f}"
            if d.max_output_channels
            else "-"
        )
        print(
            f"{d.index:>3}  {d.name[:28]:<28} {d.hostapi[:27]:<27} {d.max_input_channels:>3} "
            f"{d.max_output_channels:>3} {d.default_rate:>6.0f}  {lat_in} / {lat_out}"
        )
    if not devices:
        print("no devices (no sound card, and no PulseAudio/JACK server running?)")
    return 0
