"""`rig run`'s echo and room options (docs/devices.md): the system's own echo in its uplink,
the rig's own echo removed from a sound card's capture, and noise on a second output.
`--echo` is a RunConfig field (`session.echo`, rig.runs.records: parsed and checked there)."""

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
