"""A rollout's status, what each one counts as, and a run's exit verdict: one table.

How this works (h11 style: the answer is data, not branches): every status a metrics.json
can carry is a `Status`, and `TABLE` says for each whether it is *done* (a resume skips it:
its numbers stand), *ok* (it passes a run) and *failed* (it makes `rig run` exit 3). The
runner, resume, `rig merge`, the engine, reports and JUnit read these sets; `exit_verdict`
turns a run's statuses into its exit code for run, demo, merge and the engine alike.
A status the table does not know (a newer rig's, a hand-edited file) is not done, not ok,
and failed.

The exit codes of every command are defined here too (docs/cli.md); rig.cli re-exports them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

EXIT_OK = 0  #: done (for run/demo/merge: every rollout ok)
EXIT_FAILED = 1  #: the command failed while running (device, connection, ...)
EXIT_USAGE = 2  #: bad options or input files, or an optional extra that is not installed
EXIT_ROLLOUTS_FAILED = 3  #: the run finished, but a rollout is not ok (or not trusted)
EXIT_INTERRUPTED = 130


class Status(enum.StrEnum):
    OK = "ok"
    NO_AUDIO = "no_audio"  # a clean end, but the system sent no audio
    TIMED_OUT = "timed_out"
    PROTOCOL_ERROR = "protocol_error"
    TRANSPORT_ERROR = "transport_error"
    DEVICE_ERROR = "device_error"
    WRITE_ERROR = "write_error"  # its files could not be written: redone on resume
    ANALYSIS_ERROR = "analysis_error"  # recorded, but the analysis failed: redone on resume
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Counts:
    """What a status counts as."""

    done: bool  # a resume skips it; merge and the engine take it as finished
    ok: bool  # it passes the run
    failed: bool  # it makes the run's exit 3


#: the one table
TABLE: dict[Status, Counts] = {
    Status.OK: Counts(done=True, ok=True, failed=False),
    Status.NO_AUDIO: Counts(done=True, ok=False, failed=True),
    Status.TIMED_OUT: Counts(done=False, ok=False, failed=True),
    Status.PROTOCOL_ERROR: Counts(done=False, ok=False, failed=True),
    Status.TRANSPORT_ERROR: Counts(done=False, ok=False, failed=True),
    Status.DEVICE_ERROR: Counts(done=False, ok=False, failed=True),
    Status.WRITE_ERROR: Counts(done=False, ok=False, failed=True),
    Status.ANALYSIS_ERROR: Counts(done=False, ok=False, failed=True),
    Status.ERROR: Counts(done=False, ok=False, failed=True),
}
_UNKNOWN = Counts(done=False, ok=False, failed=True)

#: statuses a resume skips (their rollout finished and its numbers count)
DONE = frozenset(s.value for s, c in TABLE.items() if c.done)
#: statuses that pass a run
OK = frozenset(s.value for s, c in TABLE.items() if c.ok)


def counts(status: object) -> Counts:
    """What `status` (a string from a metrics.json, or a Status) counts as."""
    try:
        return TABLE[Status(str(status))]
    except ValueError:
        return _UNKNOWN


def is_done(status: object) -> bool:
    return counts(status).done


def is_ok(status: object) -> bool:
    return counts(status).ok


def exit_verdict(
    statuses: Iterable[object],
    *,
    timing_valid: Iterable[object] = (),
    complete: bool = True,
    stopped: bool = False,
) -> int:
    """A run's exit code: 0 when it was not stopped early, every planned rollout is there
    (`complete`), every status is ok and no rollout says its own timing failed
    (`timing_valid` false: its numbers cannot be trusted); else 3."""
    if stopped or not complete:
        return EXIT_ROLLOUTS_FAILED
    if not all(is_ok(s) for s in statuses):
        return EXIT_ROLLOUTS_FAILED
    if any(v is False for v in timing_valid):
        return EXIT_ROLLOUTS_FAILED
    return EXIT_OK
