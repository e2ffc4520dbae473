"""Exception tree of the rig.

    RigError                       root: anything the rig raises on purpose
    ├── LocalError                 our side: bad input, bad configuration
    │   ├── AudioInputError        a WAV file that is missing, empty, truncated, unsupported
    │   ├── ScenarioError          a scenario file that does not validate
    │   ├── ConfigError            a bad option or combination of options
    │   ├── DeviceError            a sound card that is missing, refuses a format, or vanishes
    │   └── DataFileError          a run file that cannot be written, or read back as data
    └── RemoteError                the other side: the system under test or the network
        ├── ProtocolError          a peer that sends something the protocol does not allow
        └── TransportError         a connection that fails, times out or closes mid-stream
            └── DeadlineError      a network await that passed its deadline (a peer that
                                   stopped reading or answering): the rollout is `timed_out`

Any other exception escaping the rig is a bug. Errors carry structured fields so the
session can record them (status + reason) instead of parsing messages.
"""

from __future__ import annotations


class RigError(Exception):
    """Root of every error the rig raises on purpose."""


class LocalError(RigError):
    """A fault on our side: input files, options, local devices."""


class RemoteError(RigError):
    """A fault on the far side: the system under test or the network path to it."""


class AudioInputError(LocalError):
    """An audio file the rig cannot use. Always names the file."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ScenarioError(LocalError):
    """A scenario file that does not validate. Names the file and the offending field."""

    def __init__(self, source: str, reason: str, field: str | None = None) -> None:
        where = f"{source}: {field}: " if field else f"{source}: "
        super().__init__(where + reason)
        self.source = source
        self.field = field
        self.reason = reason


class ConfigError(LocalError):
    """A bad option or combination of options."""


class DeviceError(LocalError):
    """A sound device that is missing, refuses a format, or disappears mid-run."""


class DataFileError(LocalError):
    """A file of a run (manifest, metrics, WAV, JSONL) that cannot be written, or that reads
    back as something else than the rig wrote. Always names the file."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ProtocolError(RemoteError):
    """The peer sent something its protocol does not allow (garbage, wrong type, bad order)."""

    def __init__(self, reason: str, message: object = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.message = message


class TransportError(RemoteError):
    """The connection failed, timed out, or closed before the conversation ended."""

    def __init__(self, reason: str, *, code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class DeadlineError(TransportError):
    """A network await passed its deadline: a send the peer never drained (it stopped
    reading, the TCP window is full), an answer that never came, or the rollout's
    wall-clock cap. The reason names what was stuck and for how long."""
