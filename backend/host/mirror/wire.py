"""What the mirror helper and the controller say to each other, declared once: each op's
request (without its `op`, which the controller's front adds) and its answers (without `ok`).
`list` and `abandon` answer once; `read` and `write` are resident: the reader says it started,
streams frames, then answers `recheck`; the writer says it is ready, answers `finish` with the
hashes of what it received, then `commit`. The controller holds each answer to these records
(`backend/fleet/link/wire.py`). Python 3.8: `typing.TypedDict`, optional keys in a
`total=False` subclass of the required ones."""
# Runs on the host's Python 3.8 or newer.

from typing import Any, Dict, List, Optional, TypedDict

LIST = "list"
ABANDON = "abandon"
READ = "read"
WRITE = "write"
FINISH = "finish"
RECHECK = "recheck"
COMMIT = "commit"


class ListRequest(TypedDict, total=False):
    """`list`: the folder, whether links are followed, whether files are hashed, whether the
    partial folders of a writer are left out."""

    path: str
    follow: bool
    hash: bool
    skip_partials: bool
    threads: int


class ListedFile(TypedDict, total=False):
    """One file of a listing: its facts, and its sha256 when hashed (or why it could not be)."""

    path: str
    bytes: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int
    sha256: Optional[str]
    error: str


class _ListingRequired(TypedDict):
    path: str
    real: str
    kind: Optional[str]  # None: nothing there
    dev: Optional[int]
    ino: Optional[int]
    disk: Dict[str, Any]
    mode: Optional[int]
    free_bytes: Optional[int]
    parent_dev: Optional[int]
    parent_link: Optional[str]


class Listing(_ListingRequired, total=False):
    """`list`'s answer: what the path is, on which disk, and for a folder everything in it."""

    files: List[ListedFile]
    dirs: List[List[Any]]
    symlinks: List[Any]
    special: List[Any]
    errors: List[Any]
    partials: List[Any]
    outside: List[Any]


class AbandonRequest(TypedDict, total=False):
    """`abandon`: the helper that no longer answers (pid and start time) and its partial
    folder; for a replace, where the destination and its backup should be."""

    pid: Optional[int]
    start: Optional[int]
    partial: Optional[str]
    dst: Optional[str]
    backup: Optional[str]


class _AbandonedRequired(TypedDict):
    killed: bool
    removed: Optional[str]
    blocked: Optional[str]
    gone: bool


class Abandoned(_AbandonedRequired, total=False):
    """`abandon`'s answer: whether the helper was killed and is gone, the partial folder
    removed (or what blocked it); for a replace, whether each place holds a folder."""

    exists: Optional[bool]
    dst_exists: Optional[bool]
    backup_exists: Optional[bool]


class ReadRequest(TypedDict):
    """`read`: the files to stream, from the listing the plan was made on."""

    path: str
    files: List[Dict[str, Any]]
    dirs: List[List[Any]]
    follow: bool
    outside: List[Any]
    idle: float
    wait: float


class ReaderStarted(TypedDict):
    """The reader's first answer: who it is, so the probe there counts it as the mirror's."""

    pid: int
    start: Optional[int]


class Rechecked(TypedDict):
    """`recheck`'s answer: the files whose facts moved while they were read."""

    changed: List[Any]


class _WriteRequired(TypedDict):
    path: str
    files: List[Dict[str, Any]]
    dirs: List[List[Any]]
    idle: float
    wait: float


class WriteRequest(_WriteRequired, total=False):
    """`write`: where, what arrives, the top folder's mode, the destination it replaces."""

    mode: Optional[int]
    replace: Optional[Dict[str, Any]]
    threads: int


class WriterReady(TypedDict):
    """The writer's first answer: its partial folder, the destination, who it is."""

    partial: str
    dst: str
    stale_removed: List[Any]
    pid: int
    start: Optional[int]


class Received(TypedDict):
    """`finish`'s answer: each received file hashed again from the destination's disk."""

    files: List[Any]
    found: Dict[str, Any]


class _CommittedRequired(TypedDict):
    committed: bool


class Committed(_CommittedRequired, total=False):
    """`commit`'s answer: the copy took its name; the free space after; where the replaced
    destination is kept."""

    free_bytes: Optional[int]
    kept_as: Optional[str]
