"""`rig ...`: the command line.

Each subcommand lives in its own module under `rig.cli` with two functions:
`add_parser(subparsers)` and `run(args) -> int` (the exit code). Modules are imported
lazily so `rig --help` stays fast and optional extras are only needed by the commands that
use them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from rig import __version__
from rig.errors import RigError

#: subcommand name -> module under rig.cli
COMMANDS: dict[str, str] = {
    "demo": "demo",
    "sim": "sim",
    "run": "run",
    "report": "report",
    "plot": "plot",
    "scenarios": "scenarios",
    "watch": "watch",
    "devices": "devices",
    "calibrate": "calibrate",
    "proxy": "proxy",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rig", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rig {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        try:
            module = importlib.import_module(f"rig.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("rig.cli."):
                continue  # command not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    module = importlib.import_module(f"rig.cli.{COMMANDS[args.command]}")
    try:
        code: int = module.run(args)
    except RigError as exc:
        print(f"rig {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    _exit_if_portaudio_wedged(code)
    return code


def _exit_if_portaudio_wedged(code: int) -> None:
    """A lost sound device can leave PortAudio unable to terminate (its atexit hook would
    hang the process forever). Everything the run recorded is already on disk: exit now."""
    backend = sys.modules.get("rig.device.stream")
    reason = getattr(backend, "PORTAUDIO_WEDGED", None) if backend is not None else None
    if reason:
        print(f"rig: exiting without PortAudio shutdown: {reason}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
