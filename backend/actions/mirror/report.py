"""What a mirror or a verify says: the typed plan and report (their JSON), the witnesses a
verdict stands on, and the wording of a refusal or a difference (`verify.py` compares,
`main.py` runs the mirror)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from fleetdeck.backend.actions.mirror.common import MirrorFile
from fleetdeck.backend.host.lib import units
from fleetdeck.backend.host.lib.text import shown


@dataclass(frozen=True)
class MirrorPlan:
    """What a mirror is about to copy, decided from both listings before any byte moves (a dry
    run shows exactly this). Paths are str as the hosts decoded them (undecodable bytes kept
    as surrogates, so they go back to the same bytes); show them with `host/lib/text.shown`."""

    src: str
    dst: str
    #: every regular file of SRC, status "missing" (none of it is on DST yet)
    files: tuple[MirrorFile, ...]
    #: every folder of SRC (relative), empty ones included
    dirs: tuple[str, ...]
    bytes: int
    #: False: DST is created; True: DST exists and is empty
    dst_exists: bool
    #: free bytes on DST's file system (or the nearest folder above it that exists)
    free_bytes: int | None
    follow_symlinks: bool = False
    #: links in SRC followed to targets outside it (allowed explicitly): (path, target)
    outside_links: tuple[tuple[str, str], ...] = ()
    #: the destination exists, differs, and is to be replaced (kept under `kept_as`)
    replace: bool = False

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON (files as in the report)."""
        d = asdict(self)
        d["files"] = [
            {k: v for k, v in asdict(f).items() if k != "bytes_dst" or v is not None}
            for f in self.files
        ]
        d["outside_links"] = [list(x) for x in self.outside_links]
        d["dirs"] = list(self.dirs)
        return d


@dataclass(frozen=True)
class MirrorReport:
    """What a mirror or verify found and did. `ok` is what decides exit status 0."""

    src: str
    dst: str
    dry_run: bool
    verified: bool
    bytes_src: int
    bytes_dst: int
    files: tuple[MirrorFile, ...]
    #: copied | replaced | identical | would-copy | would-replace | differs | refused | failed
    result: str
    #: a reason code when refused or failed (e.g. dst-differs, symlink, disk-full)
    reason: str | None = None
    #: one sentence saying what and why, when refused or failed
    error: str | None = None
    seconds: float = 0.0
    bytes_copied: int = 0
    #: bytes per second of the copy, when something was copied
    rate: float | None = None
    action: str = "mirror"
    #: free space on the destination's file system before and after the copy
    free_bytes_before: int | None = None
    free_bytes_after: int | None = None
    #: symlinks in SRC whose targets lie outside it, copied because they were allowed:
    #: (path in SRC, resolved target)
    outside_links: tuple[tuple[str, str], ...] = ()
    #: what the mirror set out to copy (None for verify, and when refused before planning)
    plan: MirrorPlan | None = None
    #: with --replace: where the destination that was there is kept on DST's host (its
    #: absolute path there): after `replaced`, or after a failure that left it there
    kept_as: str | None = None

    @property
    def ok(self) -> bool:
        """True when the command succeeded: verified identical by at least one witness, or a dry
        run that would proceed."""
        return (self.verified and self.witnesses > 0) or (
            self.dry_run and self.result in ("would-copy", "would-replace")
        )

    @property
    def witnesses(self) -> int:
        """The witnesses of the verdict: regular files whose size and sha256, each computed on
        its own host from its own disk, matched on both sides (0 when nothing was verified)."""
        return count_witnesses(self.files) if self.verified else 0

    @property
    def verified_by(self) -> str | None:
        """What a verified verdict stands on, in words ("3 files, 1.2 MiB, each hashed by sha256
        on both hosts and matched"); None when nothing was verified."""
        n = self.witnesses
        if not n:
            return None
        return (
            f"{n} file{'' if n == 1 else 's'}, {units.size(self.bytes_src)}, each hashed by sha256 on "
            "both hosts and matched"
        )

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON document (plus result, reason, error, seconds, rate...)."""
        d = asdict(self)
        d["files"] = [
            {k: v for k, v in asdict(f).items() if k != "bytes_dst" or v is not None}
            for f in self.files
        ]
        d["outside_links"] = [list(x) for x in self.outside_links]
        d["seconds"] = round(self.seconds, 3)
        d["plan"] = self.plan.to_json() if self.plan is not None else None
        d["witnesses"] = self.witnesses
        d["verified_by"] = self.verified_by
        return d


def count_witnesses(files: tuple[MirrorFile, ...]) -> int:
    """Files whose size and sha256 were computed on both hosts and matched."""
    return sum(
        1
        for f in files
        if f.kind == "file"
        and f.status in ("copied", "identical")
        and f.bytes_dst is None
        and f.sha256_src is not None
        and f.sha256_src == f.sha256_dst
    )


def mirror_report(
    src_label: str,
    dst_label: str,
    files: tuple[MirrorFile, ...],
    *,
    action: str,
    dry_run: bool,
    result: str,
    t0: float,
    reason: str | None = None,
    error: str | None = None,
    copied: int = 0,
    copy_seconds: float = 0.0,
    outside: tuple[tuple[str, str], ...] = (),
) -> MirrorReport:
    if result in ("copied", "identical", "replaced") and not count_witnesses(files):
        # a verdict over nothing is no pass: the one rule (mirror and verify refuse such a source
        # before this, in their own words; this holds whatever path gets here)
        result, reason, error = (
            "refused",
            NOTHING,
            no_witness_sentence(src_label, dst_label, action),
        )
    verified = result in ("copied", "identical", "replaced")
    bsrc = sum(f.bytes for f in files if f.status != "extra")
    bdst = sum(
        (f.bytes if f.bytes_dst is None else f.bytes_dst)
        for f in files
        if f.status in ("copied", "identical", "mismatch", "extra")
    )
    return MirrorReport(
        src_label,
        dst_label,
        dry_run,
        verified,
        bsrc,
        bdst,
        files,
        result,
        reason,
        error,
        time.monotonic() - t0,
        copied,
        copied / copy_seconds if copied and copy_seconds > 0 else None,
        action,
        outside_links=outside,
    )


NOTHING = "no-witness"


def no_witness_sentence(sl: str, dl: str, action: str, dirs: int | None = None) -> str:
    """The sentence of a `no-witness` refusal: a verdict needs at least one file (`dirs`: how
    many folders SRC holds, all empty; None when not known)."""
    if dirs is None:
        return (
            f"{shown(sl)} -> {shown(dl)}: no file's size and sha256 matched on both hosts, so "
            "nothing is verified"
        )
    held = (
        f"no file, only {dirs} empty folder{'' if dirs == 1 else 's'}" if dirs else "no file at all"
    )
    if action == "verify":
        return (
            f"{shown(sl)} holds {held}, and so does {shown(dl)}: identical over nothing proves "
            "nothing (a verdict needs at least one file whose size and sha256 match on both "
            "hosts); nothing was verified"
        )
    return (
        f"{shown(sl)} holds {held}: a copy of it could be proven by no file's size and sha256, "
        "so none is made; nothing was changed"
    )


def differs_sentence(sl: str, dl: str, files: tuple[MirrorFile, ...]) -> str:
    counts: dict[str, int] = {}
    for f in files:
        if f.status != "identical":
            counts[f.status] = counts.get(f.status, 0) + 1
    detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{shown(dl)} differs from {shown(sl)}: {detail}"
