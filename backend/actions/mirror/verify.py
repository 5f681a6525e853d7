"""What each side holds and whether the two agree: each host's listing (hashed there when
asked), the checks of SRC and DST before anything moves, whether they are one folder on disk,
the per-file comparison of sizes and sha256 from both hosts, and `verify`, which only compares
(`main.py` plans and runs a mirror; `report.py` words the verdict)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace as evolve
from typing import Any

from fleetdeck.backend.actions.fronts import mirror_list
from fleetdeck.backend.actions.mirror.common import HASH_RATE, MirrorFail, MirrorFile
from fleetdeck.backend.actions.mirror.report import (
    NOTHING,
    MirrorReport,
    differs_sentence,
    mirror_report,
    no_witness_sentence,
)
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.mirror.wire import Listing, ListRequest


def side_label(link: HostLink, path: str) -> str:
    return f"{link.name}:{path}"


async def list_side(
    link: HostLink,
    path: str,
    follow: bool,
    hashed: bool,
    total: int = 0,
    skip_partials: bool = False,
) -> Listing:
    """The helper's listing of `path` on its host (hashed there when asked). A destination is
    always listed with follow=False: no symlink in it is ever followed."""
    timeout = link.host.command_timeout + (total / HASH_RATE if hashed else 0)
    req: ListRequest = {
        "path": path,
        "follow": follow,
        "hash": hashed,
        "skip_partials": skip_partials,
    }
    try:
        return await mirror_list(link, req, within=timeout)
    except HelperError as e:
        raise HostError(link.name, f"mirror helper: {e.message}", "helper") from None


def check_src(src: dict, label: str, follow: bool, allow_outside: bool) -> None:
    kind = src["kind"]
    if kind is None:
        raise MirrorFail("src-not-found", f"{label} does not exist")
    if kind == "symlink":
        raise MirrorFail(
            "symlink", f"{label} is a symlink (use --follow-symlinks to copy what it points to)"
        )
    if kind != "dir":
        raise MirrorFail("src-not-a-directory", f"{label} is not a folder")
    if src["symlinks"]:
        raise MirrorFail(
            "symlink",
            f"{label} holds {len(src['symlinks'])} symlink(s), e.g. "
            f"{shown(src['symlinks'][0])} (use --follow-symlinks to copy their targets)",
        )
    if src["special"]:
        raise MirrorFail(
            "special-file",
            f"{label} holds a special file (fifo, socket or device): {shown(src['special'][0])}",
        )
    if src["errors"]:
        path, why = src["errors"][0]
        raise MirrorFail("src-unreadable", f"{label}: cannot read {shown(path)}: {why}")
    if src.get("outside") and not allow_outside:
        path, target = src["outside"][0]
        raise MirrorFail(
            "symlink-outside",
            f"{label}: the symlink {shown(path)} points outside the "
            f"folder, to {shown(target)} ({len(src['outside'])} such link(s); "
            "--allow-outside-links copies them and names them in the report)",
        )


def check_dst(dst: dict, label: str) -> None:
    if dst["kind"] == "symlink":
        raise MirrorFail("dst-symlink", f"{label} is a symlink; give the real folder")
    if dst["kind"] not in (None, "dir"):
        raise MirrorFail("dst-not-a-directory", f"{label} exists and is not a folder")
    if dst.get("errors"):
        path, why = dst["errors"][0]
        raise MirrorFail("dst-unreadable", f"{label}: cannot read {shown(path)}: {why}")


def same_disk(src: dict, dst: dict) -> str | None:
    """Whether SRC and DST are one folder on disk, judged from the identities the two hosts
    reported (`disk_identity` in the helper): "same" when DST is SRC, "inside" when one lies
    in the other, None when they are apart or it cannot be told (different boot ids: two
    kernels, whose device numbers say nothing of each other). Two fleet entries for one
    machine, a bind mount and a symlink in any parent all give the same (st_dev, st_ino)."""
    a, b = src.get("disk") or {}, dst.get("disk") or {}
    if (
        not a.get("boot")
        or a.get("boot") != b.get("boot")
        or not a.get("self")
        or not a.get("chain")
    ):
        return None
    s_chain = [tuple(x) for x in a["chain"]]
    d_chain = [tuple(x) for x in b.get("chain") or []]
    if b.get("self") and d_chain and d_chain[0] == s_chain[0]:
        return "same"
    if s_chain[0] in d_chain or (b.get("self") and d_chain and d_chain[0] in s_chain):
        return "inside"
    return None


def check_same_disk(src: dict, dst: dict, sl: str, dl: str) -> None:
    same = same_disk(src, dst)
    if same == "same":
        raise MirrorFail(
            "dst-is-src",
            f"{shown(dl)} is {shown(sl)} itself on disk (the same folder reached "
            "another way: a shared file system, a bind mount, a link in a parent or two "
            "names for one host); nothing to copy, nothing was changed",
        )
    if same == "inside":
        raise MirrorFail(
            "overlap",
            f"{shown(sl)} and {shown(dl)} are one folder on disk or one holds the "
            "other (reached through another name, a bind mount or a link); nothing was changed",
        )


def compare(src: Mapping[str, Any], dst: Mapping[str, Any] | None) -> tuple[MirrorFile, ...]:
    """Per-entry status from two hashed listings (dst None: absent, everything missing).

    Only real files compare as `identical`. A folder (empty ones too) present on one side
    only is `missing` or `extra`; so is any symlink or special file: DST is listed without
    following links, so a link there never stands in for the file it points to."""
    theirs = {f["path"]: f for f in (dst or {}).get("files", [])}
    out = []
    for f in src["files"]:
        g = theirs.pop(f["path"], None)
        if g is None:
            out.append(MirrorFile(f["path"], f["bytes"], f.get("sha256"), None, "missing"))
            continue
        same = (
            f["bytes"] == g["bytes"]
            and f.get("sha256") is not None
            and f.get("sha256") == g.get("sha256")
        )
        out.append(
            MirrorFile(
                f["path"],
                f["bytes"],
                f.get("sha256"),
                g.get("sha256"),
                "identical" if same else "mismatch",
                None if g["bytes"] == f["bytes"] else g["bytes"],
            )
        )
    for g in theirs.values():
        out.append(MirrorFile(g["path"], g["bytes"], None, g.get("sha256"), "extra"))
    sdirs = {d[0] for d in src.get("dirs", [])}
    ddirs = {d[0] for d in (dst or {}).get("dirs", [])}
    # a folder named like a writer's partial that SRC holds too is that folder, not a partial
    partials = set((dst or {}).get("partials", []))
    ddirs |= partials & sdirs
    partials -= sdirs
    out += [MirrorFile(p, 0, None, None, "missing", kind="dir") for p in sdirs - ddirs]
    out += [MirrorFile(p, 0, None, None, "extra", kind="dir") for p in ddirs - sdirs]
    # a symlink or a special file at either end differs too
    for side, status in ((dst or {}), "extra"), (src, "missing"):
        out += [
            MirrorFile(p, 0, None, None, status, kind="symlink") for p in side.get("symlinks", [])
        ]
        out += [
            MirrorFile(p, 0, None, None, status, kind="special") for p in side.get("special", [])
        ]
    out += [MirrorFile(p, 0, None, None, "extra", kind="dir") for p in sorted(partials)]
    return tuple(sorted(out, key=lambda m: (m.path, m.kind)))


def outside_of(src: dict) -> tuple[tuple[str, str], ...]:
    return tuple((p, t) for p, t in src.get("outside", []))


async def verify(
    src_link: HostLink,
    src_path: str,
    dst_link: HostLink,
    dst_path: str,
    *,
    follow_symlinks: bool = False,
    allow_outside_links: bool = False,
) -> MirrorReport:
    """Compare SRC and DST, each hashed on its own host; `verified` only if identical.

    `follow_symlinks` and `allow_outside_links` apply to SRC only: DST is read without
    following any symlink (DST itself included), so only real files there can match.
    Never raises for an expected failure: an unreachable host or a bad path is a report with
    `result="failed"` or `"refused"`, a reason code and a sentence.
    """
    t0 = time.monotonic()
    sl, dl = side_label(src_link, src_path), side_label(dst_link, dst_path)
    try:
        src, dst = await both_sides(
            list_side(src_link, src_path, follow_symlinks, False),
            list_side(dst_link, dst_path, False, False),
        )
        check_src(src, shown(sl), follow_symlinks, allow_outside_links)
        outside = outside_of(src)
        if dst["kind"] is None:
            files = compare(src, None)
            return mirror_report(
                sl,
                dl,
                files,
                action="verify",
                dry_run=False,
                result="differs",
                t0=t0,
                reason="dst-not-found",
                error=f"{shown(dl)} does not exist",
                outside=outside,
            )
        check_dst(dst, shown(dl))
        check_same_disk(src, dst, sl, dl)
        src, dst = await hash_both(
            src_link, src_path, dst_link, dst_path, follow_symlinks, allow_outside_links, src, dst
        )
        files = compare(src, dst)
        if all(f.status == "identical" for f in files):
            if not src["files"]:
                raise MirrorFail(
                    NOTHING, no_witness_sentence(sl, dl, "verify", len(src["dirs"])), files
                )
            return mirror_report(
                sl,
                dl,
                files,
                action="verify",
                dry_run=False,
                result="identical",
                t0=t0,
                outside=outside,
            )
        return mirror_report(
            sl,
            dl,
            files,
            action="verify",
            dry_run=False,
            result="differs",
            t0=t0,
            reason="differs",
            error=differs_sentence(sl, dl, files),
            outside=outside,
        )
    except MirrorFail as e:
        return mirror_report(
            sl,
            dl,
            e.files,
            action="verify",
            dry_run=False,
            result="refused",
            t0=t0,
            reason=e.reason,
            error=e.error,
        )
    except HostError as e:
        return mirror_report(
            sl,
            dl,
            (),
            action="verify",
            dry_run=False,
            result="failed",
            t0=t0,
            reason=e.code,
            error=str(e),
        )


async def both_sides(a: Awaitable[Any], b: Awaitable[Any]) -> list[Any]:
    """Both results; when one side fails, the other is cancelled and awaited before the error
    goes on (a plain gather left it running: a walk or a hash on a host nobody waits for)."""
    tasks = [asyncio.ensure_future(a), asyncio.ensure_future(b)]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def hash_both(
    src_link: HostLink,
    src_path: str,
    dst_link: HostLink,
    dst_path: str,
    follow: bool,
    allow_outside: bool,
    src: dict,
    dst: dict,
    skip_partials: bool = False,
) -> tuple[dict, dict]:
    """Both sides listed again, hashed each on its own host (DST never following a link)."""
    tot = max(sum(f["bytes"] for f in src["files"]), sum(f["bytes"] for f in dst["files"]))
    src, dst = await both_sides(
        list_side(src_link, src_path, follow, True, tot),
        list_side(dst_link, dst_path, False, True, tot, skip_partials),
    )
    check_src(src, shown(side_label(src_link, src_path)), follow, allow_outside)
    check_dst(dst, shown(side_label(dst_link, dst_path)))
    bad = [f for f in src["files"] if f.get("error")]
    if bad:
        raise MirrorFail(
            "src-unreadable",
            f"{shown(side_label(src_link, src_path))}: cannot hash "
            f"{shown(bad[0]['path'])}: {bad[0]['error']}",
        )
    return src, dst


async def verify_replaced(
    src_link: HostLink,
    src_path: str,
    dst_link: HostLink,
    dst_path: str,
    src: Mapping[str, Any],
    swap: Mapping[str, Any],
    follow: bool,
    allow_outside: bool,
    total: int,
) -> tuple[MirrorFile, ...]:
    """After the swap: DST listed and hashed again on its host, compared with SRC's hashes.
    The copy was proven in the partial folder; this proves what now has DST's name."""
    try:
        dst = await list_side(dst_link, dst_path, False, True, total)
    except HostError as e:
        raise MirrorFail(
            "unverified",
            f"the copy took {shown(side_label(dst_link, dst_path))}'s place, but it "
            f"could not be hashed again ({e.message}); the old one is kept as "
            f"{shown(swap['backup'])}",
        ) from None
    files = compare(src, dst)
    if dst["kind"] != "dir" or any(f.status != "identical" for f in files):
        raise MirrorFail(
            "unverified",
            f"{shown(side_label(dst_link, dst_path))} does not hash as the source after "
            f"the swap ({differs_sentence('', '', files).split(': ', 1)[-1]}); the old one is "
            f"kept as {shown(swap['backup'])}",
            files,
        )
    return tuple(evolve(f, status="copied") for f in files)
