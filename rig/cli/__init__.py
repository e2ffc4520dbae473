"""`rig ...`: the command line.

Each subcommand lives in its own module under `rig.cli` with two functions:
`add_parser(subparsers)` and `run(args) -> int` (the exit code). Building the parser imports
every one of those modules, so at module level they import only the standard library and
rig.errors / rig.extras: numpy, the transports and every optional extra are imported inside
`run`. `rig --help` stays fast, and a bare install (no extras) can show every command's help
and run every command that does not need one (tests/test_packaging.py checks both).

Exit status (docs/cli.md):
    0  done (for run/demo: every rollout ok)
    1  the command failed while running (device, connection, calibration refused, ...)
    2  usage: bad options or input files, or an optional extra that is not installed
    3  run/demo finished, but at least one rollout is not ok
    130 interrupted
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rig.status import (  # the exit codes are defined once, with the verdict (rig.status)
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_ROLLOUTS_FAILED,
    EXIT_USAGE,
)

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_ROLLOUTS_FAILED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

#: subcommand name -> module under rig.cli
COMMANDS: dict[str, str] = {
    "demo": "demo",
    "sim": "sim",
    "run": "run",
    "report": "report",
    "merge": "merge",
    "plot": "plot",
    "scenarios": "scenarios",
    "watch": "watch",
    "devices": "devices",
    "calibrate": "calibrate",
    "proxy": "proxy",
    "import": "importer",
}


DESCRIPTION = """rig: a real-time audio test rig for voice AI. It plays recorded user turns
into a speech system as a live participant, records everything both ways on one
clock, and times every response (each number with how sure it is)."""
EXAMPLES = """examples:
  rig demo                                     built-in turns against the embedded
                                               reference system (a table in ~10 s)
  rig sim --port 8765 &                        a reference system with ground truth
  rig run rig/data/turn_what.wav --target ws://127.0.0.1:8765
                                               play one turn into a system, record it
  rig report recordings/RUN_ID                 tables of a run (--wide, --json, --html F)
  rig plot recordings/RUN_ID/rollouts/what     a rollout's timeline picture
  rig COMMAND --help                           every option of one command

docs: README.md and docs/ (docs/api.md for Python and CI)"""


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default in its help line, unless the help says it already (or there
    is none worth saying: a flag, an unset value)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or "default" in text
            or text == argparse.SUPPRESS
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class TopHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """`rig --help`: the examples keep their columns."""


def build_parser() -> argparse.ArgumentParser:
    from rig.version import __version__

    parser = argparse.ArgumentParser(
        prog="rig", description=DESCRIPTION, epilog=EXAMPLES, formatter_class=TopHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"rig {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        importlib.import_module(f"rig.cli.{module_name}").add_parser(sub)
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, command in sub.choices.items():
        command.formatter_class = HelpFormatter
        if command.description is None and helps.get(name):  # `rig X --help` says what X is
            command.description = f"rig {name}: {helps[name]}"
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error
    args.argv = list(sys.argv[1:] if argv is None else argv)  # rig sim's workers run it again
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    from rig.errors import RigError

    try:
        code: int = importlib.import_module(f"rig.cli.{COMMANDS[args.command]}").run(args)
    except (RigError, ModuleNotFoundError) as exc:
        return _report_error(args.command, exc)
    except KeyboardInterrupt:
        _resume_hint(args)
        return EXIT_INTERRUPTED
    _exit_if_portaudio_wedged(code)
    return code


def _resume_hint(args: argparse.Namespace) -> None:
    """Ctrl-C of a run: what was kept, and the one option that finishes it."""
    if args.command not in ("run", "demo") or not args.run_id:
        return
    import os

    run_id = args.run_id
    where = os.path.join(args.out, run_id)
    print(
        f"rig {args.command}: interrupted; finished rollouts are kept in {where}: run the "
        f"same command with --run-id {run_id} to do the rest",
        file=sys.stderr,
    )


def _report_error(command: str, exc: Exception) -> int:
    """One line on stderr and the exit status for an error the rig raised on purpose, or for
    an optional extra that is missing; any other ModuleNotFoundError is a bug and re-raised."""
    from rig.errors import AudioInputError, ConfigError, RigError, ScenarioError
    from rig.extras import as_missing_extra

    missing = as_missing_extra(exc, "this command")
    if missing is not None:
        exc = missing
    elif not isinstance(exc, RigError):
        raise exc
    print(f"rig {command}: error: {exc}", file=sys.stderr)
    usage = isinstance(exc, ConfigError | ScenarioError | AudioInputError)
    return EXIT_USAGE if usage else EXIT_FAILED


def _exit_if_portaudio_wedged(code: int) -> None:
    """A lost sound device can leave PortAudio unable to terminate (its atexit hook would
    hang the process forever). Everything the run recorded is already on disk: exit now."""
    backend = sys.modules.get("rig.device.stream")
    reason = getattr(backend, "PORTAUDIO_WEDGED", None) if backend is not None else None
    if reason:
        import os

        print(f"rig: exiting without PortAudio shutdown: {reason}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
