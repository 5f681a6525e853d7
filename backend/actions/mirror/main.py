"""Mirror a folder from one host to another and prove it, or only prove two folders identical.

Each host lists and hashes its own files from its own disk (the helper `host/mirror/main.py`,
bundled with the host library, fed JSON on stdin). The destination is never read through a
symlink; `follow_symlinks` applies to the source only. A copy streams through the controller
(no temporary copy here) into a hidden partial folder beside the destination, where every file
is fsynced and hashed again; only when every size and sha256 matched, the partial folder holds
exactly the source's files and folders, and the source did not change while it was read (size,
mtime, ctime, inode; walked again after the copy) does the partial folder take the
destination's name. No wait is without a limit. docs/mirror.md lists each guarantee with the
test that proves it.
"""

from __future__ import annotations

import asyncio
import re
import time
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

_ENDPOINT = re.compile(r"([A-Za-z0-9._-]+):(.*)", re.DOTALL)

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


def parse_endpoint(text: str) -> tuple[str, str]:
    """`HOST:PATH` -> (host, path); the path is everything after the first colon, literally.

    ValueError (with a sentence) when the host name is not `[A-Za-z0-9._-]+` or the path is empty.
    """
    m = _ENDPOINT.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not HOST:PATH (host names hold only letters, digits, '.', '_', '-')"
        )
    if not m.group(2):
        raise ValueError(f"{text!r} names no path after the colon")
    return m.group(1), m.group(2)


async def mirror(
    src_link: HostLink,
    src_path: str,
    dst_link: HostLink,
    dst_path: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    follow_symlinks: bool = False,
    allow_outside_links: bool = False,
    replace: bool = False,
    confirmation: dict[str, Any] | None = None,
) -> MirrorReport:
    """Copy SRC to DST (created if absent) and prove it; see the module docstring.

    DST already identical: a verified no-op (`identical`). DST holding anything else: refused
    (`dst-differs`), untouched, unless `replace`: then the copy fills a partial folder beside
    DST, is proven there by sha256 on each host, DST is renamed aside to
    `<DST>.replaced-<UTC time>` and the copy takes its name; DST is listed and hashed again,
    and the report (`replaced`, `kept_as`) says where the old copy is (it is never deleted).
    DST that is SRC itself on disk is refused (`dst-is-src`) whatever is asked.
    `progress(bytes_done, bytes_total)` is called while copying. `confirmation` (how the
    operator confirmed a replace, and what was typed) goes into the audit record. Every mirror
    that is not a dry run is audited: intent before copying, result after.
    Never raises for an expected failure (see `verify`).
    """
    t0 = time.monotonic()
    sl, dl = side_label(src_link, src_path), side_label(dst_link, dst_path)
    base = {"src": sl, "dst": dl}
    files: tuple[MirrorFile, ...] = ()
    free: dict[str, int | None] = {"free_bytes_before": None, "free_bytes_after": None}
    outside: tuple[tuple[str, str], ...] = ()
    plan: MirrorPlan | None = None
    # relayed so far (a failed copy still reports them), and where a failed replace left the original
    seen: dict[str, Any] = {"bytes": 0, "files": 0, "kept_as": None}
    copying = False
    swap: dict[str, Any] | None = None  # a replace: the pin of DST and the name it goes to
    kept: dict[str, str | None] = {"kept_as": None}
    t1 = time.monotonic()
    try:
        typed = (confirmation or {}).get("typed")
        if (
            replace
            and typed is not None
            and not dry_run
            and typed.encode("utf-8", "surrogateescape")
            != dst_path.encode("utf-8", "surrogateescape")
        ):
            raise MirrorFail(
                "not-confirmed",
                f"the confirmation did not match: typed {shown(typed)}, the "
                f"destination is {shown(dst_path)}; nothing was changed",
            )
        src, dst = await both_sides(
            list_side(src_link, src_path, follow_symlinks, False),
            list_side(dst_link, dst_path, False, False, skip_partials=True),
        )
        free["free_bytes_before"] = free["free_bytes_after"] = dst.get("free_bytes")
        check_src(src, shown(sl), follow_symlinks, allow_outside_links)
        outside = outside_of(src)
        files = compare(src, None)  # until the copy says more: all of SRC, none of it in place
        check_dst(dst, shown(dl))
        if src_link.name == dst_link.name and (
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
        total = sum(f["bytes"] for f in src["files"])
        plan = MirrorPlan(
            sl,
            dl,
            tuple(f for f in files if f.kind == "file"),
            tuple(d[0] for d in src["dirs"]),
            total,
            dst["kind"] == "dir",
            dst.get("free_bytes"),
            follow_symlinks,
            outside,
        )
        same: MirrorReport | None = None  # DST already holds SRC's content
        if dst["kind"] == "dir" and (
            dst["files"] or dst["dirs"] or dst["symlinks"] or dst["special"]
        ):
            src, dst = await hash_both(
                src_link,
                src_path,
                dst_link,
                dst_path,
                follow_symlinks,
                allow_outside_links,
                src,
                dst,
                skip_partials=True,
            )
            files = compare(src, dst)
            if all(f.status == "identical" for f in files):
                same = mirror_report(
                    sl, dl, files, action="mirror", dry_run=dry_run, result="identical", t0=t0
                )
            elif not replace:
                raise MirrorFail(
                    "dst-differs",
                    differs_sentence(sl, dl, files) + "; nothing was changed (to replace it, "
                    "type its path in the dashboard's field, or --replace on the command line: a "
                    "proven copy takes its place and this one is kept aside)",
                    files,
                )
            else:
                # the folder compared is the one replaced: the writer checks this pin again
                swap = {"pin": [dst["dev"], dst["ino"]], "backup": replaced_name(dst["path"])}
                plan = evolve(plan, replace=True)
        if same is not None:
            rep = same
        elif dst.get("free_bytes") is not None and dst["free_bytes"] < total:
            raise MirrorFail(
                "no-space",
                f"{shown(dl)} has {gib(dst['free_bytes'])} free and the copy needs "
                f"{gib(total)}"
                + (" beside the one it replaces" if swap else "")
                + "; nothing was copied",
                compare(src, None),
            )
        elif dry_run:
            rep = mirror_report(
                sl,
                dl,
                files if swap else compare(src, None),
                action="mirror",
                dry_run=True,
                result="would-replace" if swap else "would-copy",
                t0=t0,
            )
        else:
            write(
                MirrorRecord(
                    host=dst_link.name,
                    result="started",
                    src=base["src"],
                    dst=base["dst"],
                    bytes=total,
                    files=len(src["files"]),
                    dirs=len(src["dirs"]),
                    free_bytes_before=free["free_bytes_before"],
                    outside_links=[list(x) for x in outside],
                    replace=swap is not None,
                    kept_as=swap["backup"] if swap else None,
                    confirmation=confirmation,
                    absent=STARTED_KNOWS_NOT,
                )
            )
            t1 = time.monotonic()
            copying = True
            try:
                files, free["free_bytes_after"], kept["kept_as"] = await copy_tree(
                    src_link, src, dst_link, dst_path, follow_symlinks, progress, seen, swap
                )
            except (Exception, asyncio.CancelledError) as e:
                if not isinstance(e, HostError | MirrorFail):
                    write(
                        MirrorRecord(
                            host=dst_link.name,
                            result="failed",
                            src=base["src"],
                            dst=base["dst"],
                            reason="interrupted",
                            error=f"{type(e).__name__}: {e}",
                            verified=False,
                            bytes=seen["bytes"],
                            kept_as=swap["backup"] if swap else None,
                            absent=INTERRUPTED_KNOWS_NOT,
                        )
                    )
                raise
            if swap is not None:
                files = await verify_replaced(
                    src_link,
                    src_path,
                    dst_link,
                    dst_path,
                    src,
                    swap,
                    follow_symlinks,
                    allow_outside_links,
                    total,
                )
            rep = mirror_report(
                sl,
                dl,
                files,
                action="mirror",
                dry_run=False,
                result="replaced" if swap else "copied",
                t0=t0,
                copied=total,
                copy_seconds=time.monotonic() - t1,
            )
    except MirrorFail as e:
        failed = (copying and not e.before_copy) or e.reason in FAILED_DURING_COPY
        rep = mirror_report(
            sl,
            dl,
            e.files or files,
            action="mirror",
            dry_run=dry_run,
            t0=t0,
            result="failed" if failed else "refused",
            reason=e.reason,
            error=e.error,
            copied=seen["bytes"],
            copy_seconds=time.monotonic() - t1,
        )
    except HostError as e:
        rep = mirror_report(
            sl,
            dl,
            files,
            action="mirror",
            dry_run=dry_run,
            result="failed",
            t0=t0,
            reason=e.code,
            error=str(e),
            copied=seen["bytes"],
            copy_seconds=time.monotonic() - t1,
        )
    kept["kept_as"] = kept["kept_as"] or seen.get("kept_as")
    rep = evolve(
        rep,
        free_bytes_before=free["free_bytes_before"],
        free_bytes_after=free["free_bytes_after"],
        outside_links=outside,
        plan=plan,
        kept_as=kept["kept_as"],
    )
    if not dry_run:
        write(
            MirrorRecord(
                host=dst_link.name,
                result={"copied": "done", "replaced": "done"}.get(rep.result, rep.result),
                src=base["src"],
                dst=base["dst"],
                bytes=rep.bytes_copied,
                bytes_src=rep.bytes_src,
                bytes_dst=rep.bytes_dst,
                files=len(rep.files),
                verified=rep.verified,
                witnesses=rep.witnesses,
                reason=rep.reason,
                error=rep.error,
                seconds=round(rep.seconds, 3),
                outside_links=[list(x) for x in outside],
                free_bytes_before=free["free_bytes_before"],
                free_bytes_after=free["free_bytes_after"],
                replace=swap is not None,
                kept_as=kept["kept_as"],
                confirmation=confirmation,
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
