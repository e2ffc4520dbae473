"""`rig run`'s echo and room options (docs/devices.md): the system's own echo in its uplink,
the rig's own echo removed from a sound card's capture, and noise on a second output.
`--echo` is a RunConfig field (`session.echo`, rig.runs.records: parsed and checked there);
the sound-card ones are `device.*` fields, checked by rig.device.roomopts."""

from __future__ import annotations

import argparse

from rig.runs.config import default


def add_echo_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("echo and the room (docs/devices.md)")
    g.add_argument(
        "--echo",
        metavar="SPEC",
        default=default("echo"),
        help="the system hears its own reply: erl_db=20,delay_ms=40[,rir=FILE|room=small"
        "[,distance_m=1]] adds the playback track, delayed and attenuated by the echo return "
        "loss (and through a room), to the uplink; a scenario item's `echo` table overrides it",
    )
    g.add_argument(
        "--cancel-own-echo",
        nargs="?",
        const="auto",
        default=default("cancel_own_echo"),
        metavar="auto|FILE",
        help="--transport device: remove the rig's own playback from the capture (SpeexDSP, the "
        "`aec` extra) with the impulse response `rig calibrate` stored for this path (auto) or "
        "in a calibration FILE; timing on the cleaned track, the raw one kept, ERLE reported",
    )
    g.add_argument(
        "--noise-device",
        default=default("noise_device"),
        metavar="NAME",
        help="--transport device: play a noise scene on this second output, from the first "
        "uplink frame (with --noise and --noise-level-dbfs)",
    )
    g.add_argument(
        "--noise", default=default("noise"), metavar="FILE", help="the noise scene, looped"
    )
    g.add_argument(
        "--noise-level-dbfs",
        type=float,
        default=default("noise_level_dbfs"),
        metavar="X",
        help="the scene's RMS level over the whole file, dBFS (re full scale)",
    )
