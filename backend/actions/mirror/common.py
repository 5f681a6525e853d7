"""What every part of the mirror shares: the helper it drives on each host, the rates every
budget of a copy assumes, the record of one file compared, and the failure that carries a
reason code (`copy.py` and `relay.py` move the bytes; `verify.py` compares; `main.py` runs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetdeck.backend.host.mirror import main as mirror_helper

# the host side, bundled with the host library by HostLink
HELPER = mirror_helper.__name__
HASH_RATE = 50e6  # bytes/s assumed for timeouts only: slow disks still finish
# A whole copy may take command_timeout x 2 + its bytes at MIN_RATE + PER_FILE a file (open,
# fsync, hash); no-progress timeouts catch a stall long before that.
MIN_RATE = 256 * 1024
PER_FILE = 0.05
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class MirrorFile:
    """One file of the comparison: sizes and sha256 as each host computed them from its disk."""

    path: str
    bytes: int
    sha256_src: str | None
    sha256_dst: str | None
    #: copied | identical | mismatch | missing | extra
    status: str
    bytes_dst: int | None = None
    #: file | dir | symlink | special (what stands at `path` on the side that has it)
    kind: str = "file"


class MirrorFail(Exception):
    """A refusal or failure with its reason code; `before_copy`: nothing was created yet."""

    def __init__(
        self, reason: str, error: str, files: tuple[MirrorFile, ...] = (), before_copy: bool = False
    ) -> None:
        super().__init__(error)
        self.reason, self.error, self.files = reason, error, files
        self.before_copy = before_copy


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


# failures that happen during a copy (as opposed to refusals decided before it)
FAILED_DURING_COPY = {
    "disk-full",
    "write-failed",
    "source-changed",
    "read-failed",
    "mismatch",
    "disconnected",
    "dst-changed",
    "helper",
    "swap-failed",
    "unverified",
}


def overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)
