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
from dataclasses import asdict, dataclass
from dataclasses import replace as evolve
from typing import Any

from fleetdeck.backend.actions.audit import audit
from fleetdeck.backend.actions.mirror_copy import (
    FAILED_DURING_COPY,
    HASH_RATE,
    HELPER,
    MirrorFail,
    MirrorFile,
    Progress,
    copy_tree,
    gib,
    overlaps,
)
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import units
from fleetdeck.backend.host.lib.text import shown

_ENDPOINT = re.compile(r"([A-Za-z0-9._-]+):(.*)", re.DOTALL)


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


def _label(link: HostLink, path: str) -> str:
    return f"{link.name}:{path}"


async def _list(
    link: HostLink,
    path: str,
    follow: bool,
    hashed: bool,
    total: int = 0,
    skip_partials: bool = False,
) -> dict:
    """The helper's listing of `path` on its host (hashed there when asked). A destination is
    always listed with follow=False: no symlink in it is ever followed."""
    timeout = link.host.command_timeout + (total / HASH_RATE if hashed else 0)
    try:
        res = await link.call(
            HELPER,
            "list",
            path=path,
            follow=follow,
            hash=hashed,
            skip_partials=skip_partials,
            within=timeout,
        )
    except HelperError as e:
        raise HostError(link.name, f"mirror helper: {e.message}", "helper") from None
    if "kind" not in res:
        raise HostError(
            link.name, f"mirror helper: {HelperError.of(link.name, res).message}", "helper"
        )
    return res


def _check_src(src: dict, label: str, follow: bool, allow_outside: bool) -> None:
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


def _check_dst(dst: dict, label: str) -> None:
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


def _check_same_disk(src: dict, dst: dict, sl: str, dl: str) -> None:
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


def compare(src: dict, dst: dict | None) -> tuple[MirrorFile, ...]:
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


def _report(
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
        result, reason, error = "refused", NOTHING, _nothing(src_label, dst_label, action)
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


def _nothing(sl: str, dl: str, action: str, dirs: int | None = None) -> str:
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


def _outside(src: dict) -> tuple[tuple[str, str], ...]:
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
    sl, dl = _label(src_link, src_path), _label(dst_link, dst_path)
    try:
        src, dst = await _both(
            _list(src_link, src_path, follow_symlinks, False),
            _list(dst_link, dst_path, False, False),
        )
        _check_src(src, shown(sl), follow_symlinks, allow_outside_links)
        outside = _outside(src)
        if dst["kind"] is None:
            files = compare(src, None)
            return _report(
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
        _check_dst(dst, shown(dl))
        _check_same_disk(src, dst, sl, dl)
        src, dst = await _hash_both(
            src_link, src_path, dst_link, dst_path, follow_symlinks, allow_outside_links, src, dst
        )
        files = compare(src, dst)
        if all(f.status == "identical" for f in files):
            if not src["files"]:
                raise MirrorFail(NOTHING, _nothing(sl, dl, "verify", len(src["dirs"])), files)
            return _report(
                sl,
                dl,
                files,
                action="verify",
                dry_run=False,
                result="identical",
                t0=t0,
                outside=outside,
            )
        return _report(
            sl,
            dl,
            files,
            action="verify",
            dry_run=False,
            result="differs",
            t0=t0,
            reason="differs",
            error=_differs_sentence(sl, dl, files),
            outside=outside,
        )
    except MirrorFail as e:
        return _report(
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
        return _report(
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


async def _both(a, b):
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


async def _hash_both(
    src_link, src_path, dst_link, dst_path, follow, allow_outside, src, dst, skip_partials=False
):
    """Both sides listed again, hashed each on its own host (DST never following a link)."""
    tot = max(sum(f["bytes"] for f in src["files"]), sum(f["bytes"] for f in dst["files"]))
    src, dst = await _both(
        _list(src_link, src_path, follow, True, tot),
        _list(dst_link, dst_path, False, True, tot, skip_partials),
    )
    _check_src(src, shown(_label(src_link, src_path)), follow, allow_outside)
    _check_dst(dst, shown(_label(dst_link, dst_path)))
    bad = [f for f in src["files"] if f.get("error")]
    if bad:
        raise MirrorFail(
            "src-unreadable",
            f"{shown(_label(src_link, src_path))}: cannot hash "
            f"{shown(bad[0]['path'])}: {bad[0]['error']}",
        )
    return src, dst


def _differs_sentence(sl: str, dl: str, files: tuple[MirrorFile, ...]) -> str:
    counts: dict[str, int] = {}
    for f in files:
        if f.status != "identical":
            counts[f.status] = counts.get(f.status, 0) + 1
    detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{shown(dl)} differs from {shown(sl)}: {detail}"


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
    sl, dl = _label(src_link, src_path), _label(dst_link, dst_path)
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
        src, dst = await _both(
            _list(src_link, src_path, follow_symlinks, False),
            _list(dst_link, dst_path, False, False, skip_partials=True),
        )
        free["free_bytes_before"] = free["free_bytes_after"] = dst.get("free_bytes")
        _check_src(src, shown(sl), follow_symlinks, allow_outside_links)
        outside = _outside(src)
        files = compare(src, None)  # until the copy says more: all of SRC, none of it in place
        _check_dst(dst, shown(dl))
        if src_link.name == dst_link.name and (
            overlaps(src["path"], dst["path"]) or overlaps(src["real"], dst["real"])
        ):
            raise MirrorFail(
                "overlap", f"{shown(sl)} and {shown(dl)} are the same folder or one holds the other"
            )
        _check_same_disk(src, dst, sl, dl)
        if dst.get("parent_link"):
            raise MirrorFail(
                "symlink",
                f"{shown(dl)}: the destination's folder is reached through a "
                f"symlink: {dst['parent_link']}; mirror writes only through real folders, each "
                "opened without following a link (give the path the link leads to); nothing "
                "was changed",
            )
        if not src["files"]:
            raise MirrorFail(NOTHING, _nothing(sl, dl, "mirror", len(src["dirs"])))
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
            src, dst = await _hash_both(
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
                same = _report(
                    sl, dl, files, action="mirror", dry_run=dry_run, result="identical", t0=t0
                )
            elif not replace:
                raise MirrorFail(
                    "dst-differs",
                    _differs_sentence(sl, dl, files) + "; nothing was changed "
                    "(--replace puts a proven copy in its place and keeps this one aside)",
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
            rep = _report(
                sl,
                dl,
                files if swap else compare(src, None),
                action="mirror",
                dry_run=True,
                result="would-replace" if swap else "would-copy",
                t0=t0,
            )
        else:
            audit(
                "mirror",
                dst_link.name,
                "started",
                **base,
                bytes=total,
                files=len(src["files"]),
                dirs=len(src["dirs"]),
                free_bytes_before=free["free_bytes_before"],
                outside_links=[list(x) for x in outside],
                replace=swap is not None,
                kept_as=swap["backup"] if swap else None,
                confirmation=confirmation,
            )
            t1 = time.monotonic()
            copying = True
            try:
                files, free["free_bytes_after"], kept["kept_as"] = await copy_tree(
                    src_link, src, dst_link, dst_path, follow_symlinks, progress, seen, swap
                )
            except (Exception, asyncio.CancelledError) as e:
                if not isinstance(e, HostError | MirrorFail):
                    audit(
                        "mirror",
                        dst_link.name,
                        "failed",
                        **base,
                        reason="interrupted",
                        error=f"{type(e).__name__}: {e}",
                        verified=False,
                        bytes=seen["bytes"],
                        kept_as=swap["backup"] if swap else None,
                    )
                raise
            if swap is not None:
                files = await _verify_replaced(
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
            rep = _report(
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
        rep = _report(
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
        rep = _report(
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
        audit(
            "mirror",
            dst_link.name,
            {"copied": "done", "replaced": "done"}.get(rep.result, rep.result),
            **base,
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
            **free,
            replace=swap is not None,
            kept_as=kept["kept_as"],
            confirmation=confirmation,
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


async def _verify_replaced(
    src_link, src_path, dst_link, dst_path, src, swap, follow, allow_outside, total
) -> tuple[MirrorFile, ...]:
    """After the swap: DST listed and hashed again on its host, compared with SRC's hashes.
    The copy was proven in the partial folder; this proves what now has DST's name."""
    try:
        dst = await _list(dst_link, dst_path, False, True, total)
    except HostError as e:
        raise MirrorFail(
            "unverified",
            f"the copy took {shown(_label(dst_link, dst_path))}'s place, but it "
            f"could not be hashed again ({e.message}); the old one is kept as "
            f"{shown(swap['backup'])}",
        ) from None
    files = compare(src, dst)
    if dst["kind"] != "dir" or any(f.status != "identical" for f in files):
        raise MirrorFail(
            "unverified",
            f"{shown(_label(dst_link, dst_path))} does not hash as the source after "
            f"the swap ({_differs_sentence('', '', files).split(': ', 1)[-1]}); the old one is "
            f"kept as {shown(swap['backup'])}",
            files,
        )
    return tuple(evolve(f, status="copied") for f in files)
