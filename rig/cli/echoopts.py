"""`rig run`'s echo and room options (docs/devices.md): the system's own echo in its uplink,
the rig's own echo removed from a sound card's capture, and noise on a second output."""

from __future__ import annotations

import argparse
from typing import Any


def add_echo_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("echo and the room (docs/devices.md)")
    g.add_argument(
        "--echo",
        metavar="SPEC",
        help="the system hears its own reply: erl_db=20,delay_ms=40[,rir=FILE|room=small"
        "[,distance_m=1]] adds the playback track, delayed and attenuated by the echo return "
        "loss (and through a room), to the uplink; a scenario item's `echo` table overrides it",
    )


def echo_session(args: argparse.Namespace, base: dict[str, Any]) -> None:
    """`--echo` into the session settings, in its canonical form (a bad spec: ConfigError)."""
    from rig.echo.spec import EchoSpec

    text = getattr(args, "echo", None)
    if text:
        base["echo"] = EchoSpec.parse(text).text


def check_echo(echo: str | None, frame_ms: float) -> None:
    """Refuse an echo delay the rollout's frames cannot make (rig.echo.spec); a room needs
    its extra, asked for here, before anything streams."""
    if echo:
        from rig.echo.spec import EchoSpec, check_delay
        from rig.extras import require

        spec = EchoSpec.parse(echo)
        check_delay(spec, frame_ms)
        if spec.room is not None:
            require("room", f"--echo room={spec.room}")
