"""One mirror, step by step: what it found, planned and copied so far, so that whichever step
ends it (done, refused, failed) reports and audits the same facts. `mirror()` in `main.py` runs
the steps in order: `survey` (both sides listed and checked, the plan), `judge_existing` (a
destination that holds files: identical, refused, or to be replaced), `decide` (no space, a dry
run, or the copy), and `finish` (the report completed and the result audited)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from dataclasses import replace as evolve
from typing import Any

from fleetdeck.backend.actions.audit_records import MirrorRecord, write
from fleetdeck.backend.actions.mirror.common import (
    FAILED_DURING_COPY,
    MirrorFail,
    MirrorFile,
    Progress,
    gib,
    overlaps,
)
from fleetdeck.backend.actions.mirror.copy import copy_tree
from fleetdeck.backend.actions.mirror.report import (
    NOTHING,
    MirrorPlan,
    MirrorReport,
    differs_sentence,
    mirror_report,
    no_witness_sentence,
)
from fleetdeck.backend.actions.mirror.verify import (
    both_sides,
    check_dst,
    check_same_disk,
    check_src,
    compare,
    hash_both,
    list_side,
    outside_of,
    side_label,
    verify_replaced,
)
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown

#: what a mirror's records do not carry: the start knows nothing of the copy's end, an
#: interrupted copy only what it relayed
STARTED_KNOWS_NOT = frozenset(
    {"bytes_src", "bytes_dst", "verified", "witnesses", "reason", "error", "seconds"}
    | {"free_bytes_after"}
)
INTERRUPTED_KNOWS_NOT = frozenset(
    {"bytes_src", "bytes_dst", "files", "dirs", "witnesses", "seconds", "outside_links"}
    | {"free_bytes_before", "free_bytes_after", "replace", "confirmation"}
)


def check_typed(replace: bool, dry_run: bool, confirmation: dict | None, dst_path: str) -> None:
    """A replace confirmed by typing must have typed the destination, byte for byte."""
    typed = (confirmation or {}).get("typed")
    if (
        replace
        and typed is not None
        and not dry_run
        and typed.encode("utf-8", "surrogateescape") != dst_path.encode("utf-8", "surrogateescape")
    ):
        raise MirrorFail(
            "not-confirmed",
            f"the confirmation did not match: typed {shown(typed)}, the "
            f"destination is {shown(dst_path)}; nothing was changed",
        )


@dataclass
class Attempt:
    """One mirror's request and what its steps found so far."""

    src_link: HostLink
    src_path: str
    dst_link: HostLink
    dst_path: str
    dry_run: bool
    progress: Progress | None
    follow_symlinks: bool
    allow_outside_links: bool
    replace: bool
    confirmation: dict[str, Any] | None
    t0: float = field(default_factory=time.monotonic)
    t1: float = field(default_factory=time.monotonic)  # the copy's start, once it starts
    files: tuple[MirrorFile, ...] = ()
    free: dict[str, int | None] = field(
        default_factory=lambda: {"free_bytes_before": None, "free_bytes_after": None}
    )
    outside: tuple[tuple[str, str], ...] = ()
    plan: MirrorPlan | None = None
    #: relayed so far (a failed copy still reports them), and where a failed replace left the
    #: original
    seen: dict[str, Any] = field(default_factory=lambda: {"bytes": 0, "files": 0, "kept_as": None})
    copying: bool = False
    swap: dict[str, Any] | None = None  # a replace: the pin of DST and the name it goes to
    kept_as: str | None = None
    total: int = 0

    @property
    def sl(self) -> str:
        return side_label(self.src_link, self.src_path)

    @property
    def dl(self) -> str:
        return side_label(self.dst_link, self.dst_path)

    async def survey(self) -> tuple[dict, dict]:
        """Both sides listed on their hosts and checked; the plan. MirrorFail when a check
        refuses."""
        sl, dl = self.sl, self.dl
        src, dst = await both_sides(
            list_side(self.src_link, self.src_path, self.follow_symlinks, False),
            list_side(self.dst_link, self.dst_path, False, False, skip_partials=True),
        )
        self.free["free_bytes_before"] = self.free["free_bytes_after"] = dst.get("free_bytes")
        check_src(src, shown(sl), self.follow_symlinks, self.allow_outside_links)
        self.outside = outside_of(src)
        self.files = compare(src, None)  # until the copy says more: all of SRC, none in place
        check_dst(dst, shown(dl))
        if self.src_link.name == self.dst_link.name and (
            overlaps(src["path"], dst["path"]) or overlaps(src["real"], dst["real"])
        ):
            raise MirrorFail(
                "overlap", f"{shown(sl)} and {shown(dl)} are the same folder or one holds the other"
            )
        check_same_disk(src, dst, sl, dl)
        if dst.get("parent_link"):
            raise MirrorFail(
                "symlink",
                f"{shown(dl)}: the destination's folder is reached through a "
                f"symlink: {dst['parent_link']}; mirror writes only through real folders, each "
                "opened without following a link (give the path the link leads to); nothing "
                "was changed",
            )
        if not src["files"]:
            raise MirrorFail(NOTHING, no_witness_sentence(sl, dl, "mirror", len(src["dirs"])))
        self.total = sum(f["bytes"] for f in src["files"])
        self.plan = MirrorPlan(
            sl,
            dl,
            tuple(f for f in self.files if f.kind == "file"),
            tuple(d[0] for d in src["dirs"]),
            self.total,
            dst["kind"] == "dir",
            dst.get("free_bytes"),
            self.follow_symlinks,
            self.outside,
        )
        return src, dst

    async def judge_existing(self, src: dict, dst: dict) -> tuple[dict, dict, MirrorReport | None]:
        """A destination holding anything: both sides hashed and compared. Identical: the
        report of a verified no-op; different: refused, unless a replace (then `swap`)."""
        if not (
            dst["kind"] == "dir"
            and (dst["files"] or dst["dirs"] or dst["symlinks"] or dst["special"])
        ):
            return src, dst, None
        src, dst = await hash_both(
            self.src_link,
            self.src_path,
            self.dst_link,
            self.dst_path,
            self.follow_symlinks,
            self.allow_outside_links,
            src,
            dst,
            skip_partials=True,
        )
        self.files = compare(src, dst)
        if all(f.status == "identical" for f in self.files):
            same = mirror_report(
                self.sl,
                self.dl,
                self.files,
                action="mirror",
                dry_run=self.dry_run,
                result="identical",
                t0=self.t0,
            )
            return src, dst, same
        if not self.replace:
            raise MirrorFail(
                "dst-differs",
                differs_sentence(self.sl, self.dl, self.files) + "; nothing was changed (to "
                "replace it, type its path in the dashboard's field, or --replace on the command "
                "line: a proven copy takes its place and this one is kept aside)",
                self.files,
            )
        # the folder compared is the one replaced: the writer checks this pin again
        self.swap = {"pin": [dst["dev"], dst["ino"]], "backup": replaced_name(dst["path"])}
        assert self.plan is not None  # survey made it
        self.plan = evolve(self.plan, replace=True)
        return src, dst, None

    async def decide(self, src: dict, dst: dict) -> MirrorReport:
        """No space: refused; a dry run: what would be done; else the copy."""
        swap = self.swap
        if dst.get("free_bytes") is not None and dst["free_bytes"] < self.total:
            raise MirrorFail(
                "no-space",
                f"{shown(self.dl)} has {gib(dst['free_bytes'])} free and the copy needs "
                f"{gib(self.total)}"
                + (" beside the one it replaces" if swap else "")
                + "; nothing was copied",
                compare(src, None),
            )
        if self.dry_run:
            return mirror_report(
                self.sl,
                self.dl,
                self.files if swap else compare(src, None),
                action="mirror",
                dry_run=True,
                result="would-replace" if swap else "would-copy",
                t0=self.t0,
            )
        return await self.copy(src)

    async def copy(self, src: dict) -> MirrorReport:
        """Audit the intent, copy into the partial folder, prove it, and report."""
        swap = self.swap
        write(
            MirrorRecord(
                host=self.dst_link.name,
                result="started",
                src=self.sl,
                dst=self.dl,
                bytes=self.total,
                files=len(src["files"]),
                dirs=len(src["dirs"]),
                free_bytes_before=self.free["free_bytes_before"],
                outside_links=[list(x) for x in self.outside],
                replace=swap is not None,
                kept_as=swap["backup"] if swap else None,
                confirmation=self.confirmation,
                absent=STARTED_KNOWS_NOT,
            )
        )
        self.t1 = time.monotonic()
        self.copying = True
        try:
            self.files, self.free["free_bytes_after"], self.kept_as = await copy_tree(
                self.src_link,
                src,
                self.dst_link,
                self.dst_path,
                self.follow_symlinks,
                self.progress,
                self.seen,
                swap,
            )
        except (Exception, asyncio.CancelledError) as e:
            if not isinstance(e, HostError | MirrorFail):
                write(
                    MirrorRecord(
                        host=self.dst_link.name,
                        result="failed",
                        src=self.sl,
                        dst=self.dl,
                        reason="interrupted",
                        error=f"{type(e).__name__}: {e}",
                        verified=False,
                        bytes=self.seen["bytes"],
                        kept_as=swap["backup"] if swap else None,
                        absent=INTERRUPTED_KNOWS_NOT,
                    )
                )
            raise
        if swap is not None:
            self.files = await verify_replaced(
                self.src_link,
                self.src_path,
                self.dst_link,
                self.dst_path,
                src,
                swap,
                self.follow_symlinks,
                self.allow_outside_links,
                self.total,
            )
        return mirror_report(
            self.sl,
            self.dl,
            self.files,
            action="mirror",
            dry_run=False,
            result="replaced" if swap else "copied",
            t0=self.t0,
            copied=self.total,
            copy_seconds=time.monotonic() - self.t1,
        )

    def ended(self, e: MirrorFail | HostError) -> MirrorReport:
        """The report of a mirror a check refused (before the copy) or that failed."""
        if isinstance(e, MirrorFail):
            failed = (self.copying and not e.before_copy) or e.reason in FAILED_DURING_COPY
            files, reason, error = e.files or self.files, e.reason, e.error
        else:
            failed, files, reason, error = True, self.files, e.code, str(e)
        return mirror_report(
            self.sl,
            self.dl,
            files,
            action="mirror",
            dry_run=self.dry_run,
            t0=self.t0,
            result="failed" if failed else "refused",
            reason=reason,
            error=error,
            copied=self.seen["bytes"],
            copy_seconds=time.monotonic() - self.t1,
        )

    def finish(self, rep: MirrorReport) -> MirrorReport:
        """The report completed with what the steps found, and (not a dry run) audited."""
        self.kept_as = self.kept_as or self.seen.get("kept_as")
        rep = evolve(
            rep,
            free_bytes_before=self.free["free_bytes_before"],
            free_bytes_after=self.free["free_bytes_after"],
            outside_links=self.outside,
            plan=self.plan,
            kept_as=self.kept_as,
        )
        if not self.dry_run:
            write(
                MirrorRecord(
                    host=self.dst_link.name,
                    result={"copied": "done", "replaced": "done"}.get(rep.result, rep.result),
                    src=self.sl,
                    dst=self.dl,
                    bytes=rep.bytes_copied,
                    bytes_src=rep.bytes_src,
                    bytes_dst=rep.bytes_dst,
                    files=len(rep.files),
                    verified=rep.verified,
                    witnesses=rep.witnesses,
                    reason=rep.reason,
                    error=rep.error,
                    seconds=round(rep.seconds, 3),
                    outside_links=[list(x) for x in self.outside],
                    free_bytes_before=self.free["free_bytes_before"],
                    free_bytes_after=self.free["free_bytes_after"],
                    replace=self.swap is not None,
                    kept_as=self.kept_as,
                    confirmation=self.confirmation,
                    absent=frozenset({"dirs"}),
                )
            )
        return rep


def replaced_name(dst: str, now: float | None = None) -> str:
    """Where a replaced destination is kept: `<dst>.replaced-<UTC time>` beside it (the
    folder's name cut so that the whole name stays within 255 bytes)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    head, _, name = dst.rstrip("/").rpartition("/")
    raw = name.encode("utf-8", "surrogateescape")
    tail = f".replaced-{stamp}".encode()
    raw = raw[: 255 - len(tail)] + tail
    return f"{head}/{raw.decode('utf-8', 'surrogateescape')}"
