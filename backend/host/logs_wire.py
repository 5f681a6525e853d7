"""What the log reader (`logs.py`) and the controller say to each other, declared once: `tail`'s
request and each line of its answer (the first without `ok`, which the reader adds as `serve`
does; then, following, what was appended or that the log was truncated). The controller holds
each line to its record (`backend/fleet/link/wire.py`) before it reads it. Python 3.8:
`typing.TypedDict`, optional keys in a `total=False` subclass of the required ones."""
# Runs on the host's Python 3.8 or newer.

from typing import List, Literal, TypedDict

TAIL = "tail"
#: the `event` of a follow line that says train.log shrank or was replaced
TRUNCATED = "truncated"


class _TailRequired(TypedDict):
    run: str
    roots: List[str]
    lines: int
    follow: bool


class TailRequest(_TailRequired, total=False):
    """`tail`: the run (a folder name under one of `roots`, or a path), how many of its last
    lines, whether to follow what is appended, and a regular expression the lines must match."""

    grep: str


class _CutRequired(TypedDict):
    lines: int
    bytes: int


class Cut(_CutRequired, total=False):
    """What the tail left out to fit one answer: `lines` earlier lines, `bytes` of the log;
    `partial` when the last line alone did not fit and only its end is sent."""

    partial: bool


class Searched(TypedDict):
    """How much of the log a `grep` read (`bytes`) of all there is (`size`)."""

    bytes: int
    size: int


class _TailedRequired(TypedDict):
    path: str
    text: str
    offset: int


class Tailed(_TailedRequired, total=False):
    """The first answer: the log's path, its last lines as text, the offset after them; what
    was cut, and with a `grep` how much was searched."""

    cut: Cut
    searched: Searched


class Appended(TypedDict):
    """A follow line: text appended to the log, and the offset after it."""

    text: str
    offset: int


class Truncated(TypedDict):
    """A follow line: the log shrank or was replaced; it is read again from its start."""

    event: Literal["truncated"]
