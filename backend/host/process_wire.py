"""What the process helper (`process.py`) and the controller say to each other, declared once:
`stop`'s request (without its `op`, which the controller's front adds) and its answer (without
`ok`, which `serve` adds). The controller holds the answer to `Stopped`
(`backend/fleet/link/wire.py`) before it judges its witness. Python 3.8: `typing.TypedDict`,
optional keys in a `total=False` subclass of the required ones."""
# Runs on the host's Python 3.8 or newer.

from typing import List, TypedDict

STOP = "stop"


class _StopRequired(TypedDict):
    pid: int
    start: int


class StopRequest(_StopRequired, total=False):
    """`stop`: the process as the listing showed it (pid, start time in clock ticks, command
    line), the grace before a TERM becomes a KILL, and the signal's name (TERM when absent)."""

    command: str
    grace: float
    signal: str


class Witness(TypedDict, total=False):
    """/proc read again after the signal: this pid with this start time gone, or there in
    `state`, and the file read. The controller judges whether it is the witness a result needs
    (a witness missing a key is none), so no key is required here."""

    pid: int
    start: int
    gone: bool
    state: str
    checked: str


class _StoppedRequired(TypedDict):
    result: str
    signals: List[str]


class Stopped(_StoppedRequired, total=False):
    """`stop`'s answer: what became of the process (`stopped`, `killed`, `signalled`,
    `paused`, `resumed`, or the outcomes not reached, `still-running` and `unchanged`), the
    signals sent in order, its pid, and the witness of a result reached."""

    pid: int
    witness: Witness
