"""What the holders helper (`holders.py`) and the controller say to each other, declared once:
`holders`'s request (without its `op`, which the controller's front adds) and its answer
(without `ok`, which `serve` adds). The controller holds the answer to `Holders`
(`backend/fleet/link/wire.py`) before it reads it. Python 3.8: `typing.TypedDict`."""
# Runs on the host's Python 3.8 or newer.

from typing import List, Literal, TypedDict

HOLDERS = "holders"


class HoldersRequest(TypedDict):
    """`holders`: the path (absolute, or starting with `~`) whose holders are asked for."""

    path: str


class Use(TypedDict):
    """One way a process holds a file under the path: an open descriptor, a mapping, its
    working or root folder."""

    how: Literal["fd", "maps", "cwd", "root"]
    file: str


class Holder(TypedDict):
    """A process holding a file under the path: its identity (pid and start time), owner,
    command line, short name, its first uses and how many more it has."""

    pid: int
    start: int
    user: str
    command: str
    comm: str
    uses: List[Use]
    more_uses: int


class Unreadable(TypedDict):
    """A process whose fds or maps could not be read, and why."""

    pid: int
    comm: str
    error: str


class Holders(TypedDict):
    """`holders`'s answer: the path as given and resolved, whether it is a folder, the entries
    indexed and whether that was all of them, the processes read, the holders, the unreadable."""

    path: str
    resolved: str
    kind: Literal["directory", "file"]
    entries: int
    complete: bool
    processes: int
    holders: List[Holder]
    unreadable: List[Unreadable]
