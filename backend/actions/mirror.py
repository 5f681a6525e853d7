"""Mirror a folder from one host to another and prove it, or only prove two folders identical.

Each host lists and hashes its own files from its own disk (the helper `host/mirror.py`,
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
import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from dataclasses import replace as evolve
from typing import Any

import asyncssh

from fleetdeck.backend.actions.audit import audit
from fleetdeck.backend.fleet.ssh import HelperProcess, HostError, HostLink, ShellOutputError
from fleetdeck.backend.host.lib.text import shown

# the host side, bundled with the host library by HostLink
HELPER = "fleetdeck.backend.host.mirror"
_ENDPOINT = re.compile(r"([A-Za-z0-9._-]+):(.*)", re.DOTALL)
HASH_RATE = 50e6  # bytes/s assumed for timeouts only: slow disks still finish
# A whole copy may take command_timeout x 2 + its bytes at MIN_RATE + PER_FILE a file (open,
# fsync, hash); no-progress timeouts catch a stall long before that.
MIN_RATE = 256 * 1024
PER_FILE = 0.05
Progress = Callable[[int, int], None]


def parse_endpoint(text: str) -> tuple[str, str]:
    """`HOST:PATH` -> (host, path); the path is everything after the first colon, literally.

    ValueError (with a sentence) when the host name is not `[A-Za-z0-9._-]+` or the path is empty.
    """
    m = _ENDPOINT.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not HOST:PATH (host names hold only letters, digits, '.', '_', '-')")
    if not m.group(2):
        raise ValueError(f"{text!r} names no path after the colon")
    return m.group(1), m.group(2)


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
        d["files"] = [{k: v for k, v in asdict(f).items() if k != "bytes_dst" or v is not None}
                      for f in self.files]
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
        """True when the command succeeded: verified identical, or a dry run that would proceed."""
        return self.verified or (self.dry_run and self.result in ("would-copy", "would-replace"))

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON document (plus result, reason, error, seconds, rate...)."""
        d = asdict(self)
        d["files"] = [{k: v for k, v in asdict(f).items() if k != "bytes_dst" or v is not None}
                      for f in self.files]
        d["outside_links"] = [list(x) for x in self.outside_links]
        d["seconds"] = round(self.seconds, 3)
        d["plan"] = self.plan.to_json() if self.plan is not None else None
        return d


class _Fail(Exception):
    """A refusal or failure with its reason code; `before_copy`: nothing was created yet."""

    def __init__(self, reason: str, error: str, files: tuple[MirrorFile, ...] = (),
                 before_copy: bool = False) -> None:
        super().__init__(error)
        self.reason, self.error, self.files = reason, error, files
        self.before_copy = before_copy


def _label(link: HostLink, path: str) -> str:
    return f"{link.name}:{path}"


async def _list(link: HostLink, path: str, follow: bool, hashed: bool, total: int = 0,
                skip_partials: bool = False) -> dict:
    """The helper's listing of `path` on its host (hashed there when asked). A destination is
    always listed with follow=False: no symlink in it is ever followed."""
    timeout = link.host.command_timeout + (total / HASH_RATE if hashed else 0)
    res = await link.run_helper(HELPER, {"op": "list", "path": path, "follow": follow, "hash": hashed,
                                         "skip_partials": skip_partials}, timeout=timeout)
    if not isinstance(res, dict) or not res.get("ok") or "kind" not in res:
        _code, msg = _error_of(res)
        raise HostError(link.name, f"mirror helper: {msg}", "helper")
    return res


def _error_of(answer: Any) -> tuple[str, str]:
    """(code, sentence) of a helper's error answer (the host library's one shape)."""
    err = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(err, dict):
        return str(err.get("code") or "helper"), str(err.get("message") or "failed")
    return "helper", f"unexpected answer {str(answer)[:200]}"


def _check_src(src: dict, label: str, follow: bool, allow_outside: bool) -> None:
    kind = src["kind"]
    if kind is None:
        raise _Fail("src-not-found", f"{label} does not exist")
    if kind == "symlink":
        raise _Fail("symlink", f"{label} is a symlink (use --follow-symlinks to copy what it points to)")
    if kind != "dir":
        raise _Fail("src-not-a-directory", f"{label} is not a folder")
    if src["symlinks"]:
        raise _Fail("symlink", f"{label} holds {len(src['symlinks'])} symlink(s), e.g. "
                    f"{shown(src['symlinks'][0])} (use --follow-symlinks to copy their targets)")
    if src["special"]:
        raise _Fail("special-file", f"{label} holds a special file (fifo, socket or device): "
                    f"{shown(src['special'][0])}")
    if src["errors"]:
        path, why = src["errors"][0]
        raise _Fail("src-unreadable", f"{label}: cannot read {shown(path)}: {why}")
    if src.get("outside") and not allow_outside:
        path, target = src["outside"][0]
        raise _Fail("symlink-outside", f"{label}: the symlink {shown(path)} points outside the "
                    f"folder, to {shown(target)} ({len(src['outside'])} such link(s); "
                    "--allow-outside-links copies them and names them in the report)")


def _check_dst(dst: dict, label: str) -> None:
    if dst["kind"] == "symlink":
        raise _Fail("dst-symlink", f"{label} is a symlink; give the real folder")
    if dst["kind"] not in (None, "dir"):
        raise _Fail("dst-not-a-directory", f"{label} exists and is not a folder")
    if dst.get("errors"):
        path, why = dst["errors"][0]
        raise _Fail("dst-unreadable", f"{label}: cannot read {shown(path)}: {why}")


def same_disk(src: dict, dst: dict) -> str | None:
    """Whether SRC and DST are one folder on disk, judged from the identities the two hosts
    reported (`disk_identity` in the helper): "same" when DST is SRC, "inside" when one lies
    in the other, None when they are apart or it cannot be told (different boot ids: two
    kernels, whose device numbers say nothing of each other). Two fleet entries for one
    machine, a bind mount and a symlink in any parent all give the same (st_dev, st_ino)."""
    a, b = src.get("disk") or {}, dst.get("disk") or {}
    if not a.get("boot") or a.get("boot") != b.get("boot") or not a.get("self") or not a.get("chain"):
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
        raise _Fail("dst-is-src", f"{shown(dl)} is {shown(sl)} itself on disk (the same folder reached "
                    "another way: a shared file system, a bind mount, a link in a parent or two "
                    "names for one host); nothing to copy, nothing was changed")
    if same == "inside":
        raise _Fail("overlap", f"{shown(sl)} and {shown(dl)} are one folder on disk or one holds the "
                    "other (reached through another name, a bind mount or a link); nothing was changed")


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
        same = (f["bytes"] == g["bytes"] and f.get("sha256") is not None
                and f.get("sha256") == g.get("sha256"))
        out.append(MirrorFile(f["path"], f["bytes"], f.get("sha256"), g.get("sha256"),
                              "identical" if same else "mismatch",
                              None if g["bytes"] == f["bytes"] else g["bytes"]))
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
        out += [MirrorFile(p, 0, None, None, status, kind="symlink") for p in side.get("symlinks", [])]
        out += [MirrorFile(p, 0, None, None, status, kind="special") for p in side.get("special", [])]
    out += [MirrorFile(p, 0, None, None, "extra", kind="dir") for p in sorted(partials)]
    return tuple(sorted(out, key=lambda m: (m.path, m.kind)))


def _report(src_label: str, dst_label: str, files: tuple[MirrorFile, ...], *, action: str,
            dry_run: bool, result: str, t0: float, reason: str | None = None,
            error: str | None = None, copied: int = 0, copy_seconds: float = 0.0,
            outside: tuple[tuple[str, str], ...] = ()) -> MirrorReport:
    verified = result in ("copied", "identical", "replaced")
    bsrc = sum(f.bytes for f in files if f.status != "extra")
    bdst = sum((f.bytes if f.bytes_dst is None else f.bytes_dst) for f in files
               if f.status in ("copied", "identical", "mismatch", "extra"))
    return MirrorReport(src_label, dst_label, dry_run, verified, bsrc, bdst, files, result,
                        reason, error, time.monotonic() - t0, copied,
                        copied / copy_seconds if copied and copy_seconds > 0 else None, action,
                        outside_links=outside)


def _outside(src: dict) -> tuple[tuple[str, str], ...]:
    return tuple((p, t) for p, t in src.get("outside", []))


async def verify(src_link: HostLink, src_path: str, dst_link: HostLink, dst_path: str, *,
                 follow_symlinks: bool = False, allow_outside_links: bool = False) -> MirrorReport:
    """Compare SRC and DST, each hashed on its own host; `verified` only if identical.

    `follow_symlinks` and `allow_outside_links` apply to SRC only: DST is read without
    following any symlink (DST itself included), so only real files there can match.
    Never raises for an expected failure: an unreachable host or a bad path is a report with
    `result="failed"` or `"refused"`, a reason code and a sentence.
    """
    t0 = time.monotonic()
    sl, dl = _label(src_link, src_path), _label(dst_link, dst_path)
    try:
        src, dst = await _both(_list(src_link, src_path, follow_symlinks, False),
                               _list(dst_link, dst_path, False, False))
        _check_src(src, shown(sl), follow_symlinks, allow_outside_links)
        outside = _outside(src)
        if dst["kind"] is None:
            files = compare(src, None)
            return _report(sl, dl, files, action="verify", dry_run=False, result="differs", t0=t0,
                           reason="dst-not-found", error=f"{shown(dl)} does not exist",
                           outside=outside)
        _check_dst(dst, shown(dl))
        _check_same_disk(src, dst, sl, dl)
        src, dst = await _hash_both(src_link, src_path, dst_link, dst_path, follow_symlinks,
                                    allow_outside_links, src, dst)
        files = compare(src, dst)
        if all(f.status == "identical" for f in files):
            return _report(sl, dl, files, action="verify", dry_run=False, result="identical", t0=t0,
                           outside=outside)
        return _report(sl, dl, files, action="verify", dry_run=False, result="differs", t0=t0,
                       reason="differs", error=_differs_sentence(sl, dl, files), outside=outside)
    except _Fail as e:
        return _report(sl, dl, e.files, action="verify", dry_run=False, result="refused", t0=t0,
                       reason=e.reason, error=e.error)
    except HostError as e:
        return _report(sl, dl, (), action="verify", dry_run=False, result="failed", t0=t0,
                       reason=e.code, error=str(e))


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


async def _hash_both(src_link, src_path, dst_link, dst_path, follow, allow_outside, src, dst,
                     skip_partials=False):
    """Both sides listed again, hashed each on its own host (DST never following a link)."""
    tot = max(sum(f["bytes"] for f in src["files"]), sum(f["bytes"] for f in dst["files"]))
    src, dst = await _both(_list(src_link, src_path, follow, True, tot),
                           _list(dst_link, dst_path, False, True, tot, skip_partials))
    _check_src(src, shown(_label(src_link, src_path)), follow, allow_outside)
    _check_dst(dst, shown(_label(dst_link, dst_path)))
    bad = [f for f in src["files"] if f.get("error")]
    if bad:
        raise _Fail("src-unreadable", f"{shown(_label(src_link, src_path))}: cannot hash "
                    f"{shown(bad[0]['path'])}: {bad[0]['error']}")
    return src, dst


def _differs_sentence(sl: str, dl: str, files: tuple[MirrorFile, ...]) -> str:
    counts: dict[str, int] = {}
    for f in files:
        if f.status != "identical":
            counts[f.status] = counts.get(f.status, 0) + 1
    detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{shown(dl)} differs from {shown(sl)}: {detail}"


async def mirror(src_link: HostLink, src_path: str, dst_link: HostLink, dst_path: str, *,
                 dry_run: bool = False, progress: Progress | None = None,
                 follow_symlinks: bool = False, allow_outside_links: bool = False,
                 replace: bool = False, confirmation: dict[str, Any] | None = None) -> MirrorReport:
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
        if replace and typed is not None and not dry_run and \
                typed.encode("utf-8", "surrogateescape") != dst_path.encode("utf-8", "surrogateescape"):
            raise _Fail("not-confirmed", f"the confirmation did not match: typed {shown(typed)}, the "
                        f"destination is {shown(dst_path)}; nothing was changed")
        src, dst = await _both(_list(src_link, src_path, follow_symlinks, False),
                               _list(dst_link, dst_path, False, False, skip_partials=True))
        free["free_bytes_before"] = free["free_bytes_after"] = dst.get("free_bytes")
        _check_src(src, shown(sl), follow_symlinks, allow_outside_links)
        outside = _outside(src)
        files = compare(src, None)  # until the copy says more: all of SRC, none of it in place
        _check_dst(dst, shown(dl))
        if src_link.name == dst_link.name and (_overlap(src["path"], dst["path"])
                                               or _overlap(src["real"], dst["real"])):
            raise _Fail("overlap", f"{shown(sl)} and {shown(dl)} are the same folder or one holds "
                        "the other")
        _check_same_disk(src, dst, sl, dl)
        total = sum(f["bytes"] for f in src["files"])
        plan = MirrorPlan(sl, dl, tuple(f for f in files if f.kind == "file"),
                          tuple(d[0] for d in src["dirs"]), total, dst["kind"] == "dir",
                          dst.get("free_bytes"), follow_symlinks, outside)
        same: MirrorReport | None = None  # DST already holds SRC's content
        if dst["kind"] == "dir" and (dst["files"] or dst["dirs"] or dst["symlinks"] or dst["special"]):
            src, dst = await _hash_both(src_link, src_path, dst_link, dst_path, follow_symlinks,
                                        allow_outside_links, src, dst, skip_partials=True)
            files = compare(src, dst)
            if all(f.status == "identical" for f in files):
                same = _report(sl, dl, files, action="mirror", dry_run=dry_run, result="identical", t0=t0)
            elif not replace:
                raise _Fail("dst-differs", _differs_sentence(sl, dl, files) + "; nothing was changed "
                            "(--replace puts a proven copy in its place and keeps this one aside)",
                            files)
            else:
                # the folder compared is the one replaced: the writer checks this pin again
                swap = {"pin": [dst["dev"], dst["ino"]], "backup": replaced_name(dst["path"])}
                plan = evolve(plan, replace=True)
        if same is not None:
            rep = same
        elif dst.get("free_bytes") is not None and dst["free_bytes"] < total:
            raise _Fail("no-space", f"{shown(dl)} has {_gib(dst['free_bytes'])} free and the copy needs "
                        f"{_gib(total)}" + (" beside the one it replaces" if swap else "")
                        + "; nothing was copied", compare(src, None))
        elif dry_run:
            rep = _report(sl, dl, files if swap else compare(src, None), action="mirror", dry_run=True,
                          result="would-replace" if swap else "would-copy", t0=t0)
        else:
            audit("mirror", dst_link.name, "started", **base, bytes=total, files=len(src["files"]),
                  dirs=len(src["dirs"]), free_bytes_before=free["free_bytes_before"],
                  outside_links=[list(x) for x in outside], replace=swap is not None,
                  kept_as=swap["backup"] if swap else None, confirmation=confirmation)
            t1 = time.monotonic()
            copying = True
            try:
                files, free["free_bytes_after"], kept["kept_as"] = await _copy(
                    src_link, src, dst_link, dst_path, follow_symlinks, progress, seen, swap)
            except (Exception, asyncio.CancelledError) as e:
                if not isinstance(e, HostError | _Fail):
                    audit("mirror", dst_link.name, "failed", **base, reason="interrupted",
                          error=f"{type(e).__name__}: {e}", verified=False, bytes=seen["bytes"],
                          kept_as=swap["backup"] if swap else None)
                raise
            if swap is not None:
                files = await _verify_replaced(src_link, src_path, dst_link, dst_path, src, swap,
                                               follow_symlinks, allow_outside_links, total)
            rep = _report(sl, dl, files, action="mirror", dry_run=False,
                          result="replaced" if swap else "copied", t0=t0,
                          copied=total, copy_seconds=time.monotonic() - t1)
    except _Fail as e:
        failed = (copying and not e.before_copy) or e.reason in _FAILED
        rep = _report(sl, dl, e.files or files, action="mirror", dry_run=dry_run, t0=t0,
                      result="failed" if failed else "refused", reason=e.reason, error=e.error,
                      copied=seen["bytes"], copy_seconds=time.monotonic() - t1)
    except HostError as e:
        rep = _report(sl, dl, files, action="mirror", dry_run=dry_run, result="failed", t0=t0,
                      reason=e.code, error=str(e), copied=seen["bytes"],
                      copy_seconds=time.monotonic() - t1)
    kept["kept_as"] = kept["kept_as"] or seen.get("kept_as")  # type: ignore[assignment]
    rep = evolve(rep, **free, outside_links=outside, plan=plan, kept_as=kept["kept_as"])
    if not dry_run:
        audit("mirror", dst_link.name, {"copied": "done", "replaced": "done"}.get(rep.result, rep.result),
              **base, bytes=rep.bytes_copied, bytes_src=rep.bytes_src, bytes_dst=rep.bytes_dst,
              files=len(rep.files), verified=rep.verified, reason=rep.reason, error=rep.error,
              seconds=round(rep.seconds, 3), outside_links=[list(x) for x in outside], **free,
              replace=swap is not None, kept_as=kept["kept_as"], confirmation=confirmation)
    return rep


def replaced_name(dst: str, now: float | None = None) -> str:
    """Where a replaced destination is kept: `<dst>.replaced-<UTC time>` beside it (the
    folder's name cut so that the whole name stays within 255 bytes)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    head, _, name = dst.rstrip("/").rpartition("/")
    raw = name.encode("utf-8", "surrogateescape")
    tail = f".replaced-{stamp}".encode()
    raw = raw[:255 - len(tail)] + tail
    return f"{head}/{raw.decode('utf-8', 'surrogateescape')}"


async def _verify_replaced(src_link, src_path, dst_link, dst_path, src, swap, follow, allow_outside,
                           total) -> tuple[MirrorFile, ...]:
    """After the swap: DST listed and hashed again on its host, compared with SRC's hashes.
    The copy was proven in the partial folder; this proves what now has DST's name."""
    try:
        dst = await _list(dst_link, dst_path, False, True, total)
    except HostError as e:
        raise _Fail("unverified", f"the copy took {shown(_label(dst_link, dst_path))}'s place, but it "
                    f"could not be hashed again ({e.message}); the old one is kept as "
                    f"{shown(swap['backup'])}") from None
    files = compare(src, dst)
    if dst["kind"] != "dir" or any(f.status != "identical" for f in files):
        raise _Fail("unverified", f"{shown(_label(dst_link, dst_path))} does not hash as the source after "
                    f"the swap ({_differs_sentence('', '', files).split(': ', 1)[-1]}); the old one is "
                    f"kept as {shown(swap['backup'])}", files)
    return tuple(evolve(f, status="copied") for f in files)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


# failures that happen during a copy (as opposed to refusals decided before it)
_FAILED = {"disk-full", "write-failed", "source-changed", "read-failed", "mismatch",
           "disconnected", "dst-changed", "helper", "swap-failed", "unverified"}


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _fail_from(link: HostLink, answer: dict, tail: str = "") -> _Fail:
    code, msg = _error_of(answer)
    return _Fail(code, f"{link.name}: {shown(msg)}{tail}")


async def _copy(src_link: HostLink, src: dict, dst_link: HostLink, dst_path: str, follow: bool,
                progress: Progress | None, seen: dict[str, Any], swap: dict[str, Any] | None = None
                ) -> tuple[tuple[MirrorFile, ...], int | None, str | None]:
    """Stream every file through here into DST's partial folder; commit only if all matched.

    On any failure both helpers are stopped and the partial folder is removed (checked on
    the destination afterwards), and the error says so. `seen["bytes"]` counts what was
    relayed, for the report of a failed copy."""
    run = _Copy(src_link, src, dst_link, dst_path, follow, progress, seen, swap)
    try:
        return await run.go()
    except _Fail as e:
        note = await run.cleanup()
        seen["kept_as"] = run.kept_as
        raise _Fail(e.reason, f"{e.error}; {note}", e.files, before_copy=e.before_copy) from None
    except HostError as e:
        note = await run.cleanup()
        seen["kept_as"] = run.kept_as
        raise HostError(e.host, f"{e.message}; {note}", e.code) from None
    finally:
        await run.cleanup()


class _Copy:
    """One copy: the two helpers, the relay between them, and the cleanup after a failure.

    No wait is unbounded: every read from the reader and every drain towards the writer must
    move bytes within the host's `command_timeout` (a stopped reader or writer, a stuck disk
    and a silent connection all end there), and the copy as a whole has a deadline that grows
    with its bytes and its file count. The helpers carry their own no-progress timeout too
    (`Watchdog` in host/mirror.py), for a controller that stops without closing anything."""

    def __init__(self, src_link, src, dst_link, dst_path, follow, progress, seen, swap=None) -> None:
        self.src_link, self.src, self.dst_link, self.dst_path = src_link, src, dst_link, dst_path
        self.swap = swap
        self.dst_abs: str | None = None
        #: after a failed replace: the kept name, when DST's host says the original is there
        self.kept_as: str | None = None
        self.follow, self.progress, self.seen = follow, progress, seen
        self.files = src["files"]
        self.total = sum(f["bytes"] for f in self.files)
        self.s_idle = float(src_link.host.command_timeout)
        self.d_idle = float(dst_link.host.command_timeout)
        # the helpers give up later than this side notices, so the stalled side gets named
        self.helper_idle = 2 * max(self.s_idle, self.d_idle) + 5
        self.settle = self.total / HASH_RATE + len(self.files) * PER_FILE
        self.limit = 2 * max(self.s_idle, self.d_idle) + self.total / MIN_RATE + self.settle
        self.deadline = time.monotonic() + self.limit
        self.reader: HelperProcess | None = None
        self.writer: HelperProcess | None = None
        self.writer_said: asyncio.Future | None = None
        self.r_id: tuple[int, int] | None = None
        self.w_id: tuple[int, int] | None = None
        self.partial: str | None = None
        self.committed = False
        self.cleaned: str | None = None

    # -- bounded steps ----------------------------------------------------------------------
    def _stalled(self, side: str, what: str, secs: float) -> HostError:
        link = self.src_link if side == "source" else self.dst_link
        if time.monotonic() >= self.deadline:
            return HostError(link.name, f"the copy took longer than its limit of {self.limit:.0f}s "
                             f"({_gib(self.total)} in {len(self.files)} files); it was stopped",
                             "timeout")
        return HostError(link.name, f"the {side} stalled: {what} for {secs:g}s (a stopped "
                         "process, a stuck disk or a silent connection); the copy was stopped",
                         "timeout")

    def _budget(self, idle: float) -> float:
        return max(0.0, min(idle, self.deadline - time.monotonic()))

    async def _bounded(self, aw: Any, side: str, what: str, idle: float) -> Any:
        t = self._budget(idle)
        try:
            return await asyncio.wait_for(aw, t)
        except TimeoutError:
            raise self._stalled(side, what, t) from None

    async def _send(self, h: HelperProcess, obj: Any, side: str) -> None:
        idle = self.s_idle if side == "source" else self.d_idle
        await self._bounded(h.send_json(obj), side, "its helper took no input", idle)

    async def _answer(self, h: HelperProcess, side: str, what: str, idle: float) -> dict:
        link = self.src_link if side == "source" else self.dst_link
        return await self._bounded(_recv(h, link, None), side, what, idle)

    async def _start(self, link: HostLink, side: str) -> HelperProcess:
        try:
            return await self._bounded(link.transfer_helper(HELPER), side, "starting its helper",
                                       link.host.connect_timeout + link.host.command_timeout)
        except (asyncssh.Error, OSError) as e:
            raise HostError(link.name, f"connection lost: {e}", "disconnected") from None

    # -- the copy ---------------------------------------------------------------------------
    async def go(self) -> tuple[tuple[MirrorFile, ...], int | None]:
        sl, dl = self.src_link, self.dst_link
        try:
            started = await asyncio.gather(self._start(sl, "source"), self._start(dl, "destination"),
                                           return_exceptions=True)
            self.reader, self.writer = (h if isinstance(h, HelperProcess) else None for h in started)
            for h in started:
                if isinstance(h, BaseException):
                    raise h
            reader, writer = self.reader, self.writer
            assert reader is not None and writer is not None
            await self._send(writer, {"op": "write", "path": self.dst_path, "files": self.files,
                                      "dirs": self.src["dirs"], "mode": self.src.get("mode"),
                                      "idle": self.helper_idle, "replace": self.swap,
                                      "wait": self.helper_idle + self.settle}, "destination")
            ready = await self._answer(writer, "destination", "its writer did not get ready",
                                       self.d_idle)
            if not ready.get("ok"):
                e = _fail_from(dl, ready)
                e.before_copy = True  # nothing was created: a refusal
                raise e
            self.w_id, self.partial = (ready.get("pid"), ready.get("start")), ready.get("partial")
            self.dst_abs = ready.get("dst")
            await self._send(reader, {"op": "read", "path": self.src["path"], "files": self.files,
                                      "dirs": self.src["dirs"], "follow": self.follow,
                                      "outside": self.src.get("outside") or [],
                                      "idle": self.helper_idle,
                                      "wait": self.helper_idle + self.settle}, "source")
            hello = await self._answer(reader, "source", "its reader did not start", self.s_idle)
            if not hello.get("ok"):
                raise _fail_from(sl, hello)
            self.r_id = (hello.get("pid"), hello.get("start"))
            # the writer speaks only on failure until it is told to finish
            self.writer_said = asyncio.ensure_future(_recv(writer, dl, None))
            trailers = await self._relay()
            await self._send(writer, {"op": "finish"}, "destination")
            await self._send(reader, {"op": "recheck"}, "source")
            hashed = await self._bounded(asyncio.shield(self.writer_said), "destination",
                                         "its writer reported no hashes", self.d_idle + self.settle)
            if not hashed.get("ok"):
                raise _fail_from(dl, hashed)
            # the source is walked again, and any file whose facts moved is hashed again there
            recheck = await self._answer(reader, "source", "it did not finish its re-check",
                                         self.s_idle + self.settle)
            if not recheck.get("ok"):
                raise _fail_from(sl, recheck)
            result = self._judge(trailers, hashed, recheck)
            await self._send(writer, {"op": "commit"}, "destination")
            done = await self._answer(writer, "destination", "its writer did not commit",
                                      self.d_idle)
            self.committed = bool(done.get("committed"))
            if not self.committed:
                raise _fail_from(dl, done)
            return result, done.get("free_bytes"), done.get("kept_as")
        except (asyncssh.Error, OSError, EOFError, asyncio.IncompleteReadError) as e:
            said = await _last_word(self.writer_said)
            if said is not None and not said.get("ok"):
                raise _fail_from(dl, said) from None
            raise HostError(await _which_died(sl, dl), f"connection lost during the copy "
                            f"({type(e).__name__}: {e})", "disconnected") from None

    def _judge(self, trailers: list[dict], hashed: dict, recheck: dict) -> tuple[MirrorFile, ...]:
        result = []
        for f, t, h in zip(self.files, trailers, hashed["files"], strict=True):
            ok = t["bytes"] == f["bytes"] == h.get("bytes") and t["sha256"] == h["sha256"]
            result.append(MirrorFile(f["path"], f["bytes"], t["sha256"], h["sha256"],
                                     "copied" if ok else "mismatch",
                                     None if h.get("bytes") == f["bytes"] else h.get("bytes")))
        found = hashed.get("found") or {}
        if (set(found.get("files", [])) != {f["path"] for f in self.files} or found.get("other")
                or set(found.get("dirs", [])) != {d[0] for d in self.src["dirs"]}):
            raise _Fail("mismatch", f"{self.dst_link.name}: the partial folder does not hold "
                        "exactly the source's files and folders", tuple(result))
        if recheck.get("changed"):
            path, why = recheck["changed"][0]
            more = len(recheck["changed"]) - 1
            raise _Fail("source-changed", f"{self.src_link.name}: {shown(path)} changed while it "
                        f"was copied ({why})" + (f", and {more} more" if more else ""), tuple(result))
        bad = [m for m in result if m.status != "copied"]
        if bad:
            raise _Fail("mismatch", f"{shown(bad[0].path)} differs after the copy", tuple(result))
        return tuple(result)

    async def _pull(self, aw: Any) -> Any:
        """Bytes from the reader, within the no-progress limit; a stream that ended is the
        source's (its host or its connection went away)."""
        try:
            return await self._bounded(aw, "source", "its reader sent nothing", self.s_idle)
        except (asyncio.IncompleteReadError, ConnectionError, asyncssh.Error) as e:
            raise HostError(self.src_link.name, f"the source's stream ended during the copy "
                            f"({type(e).__name__})", "disconnected") from None

    async def _push(self) -> None:
        """Wait until the writer took what was written, within the no-progress limit; a
        stream that broke is the destination's, with the writer's last word if it said one."""
        assert self.writer is not None
        try:
            await self._bounded(self.writer.stdin.drain(), "destination", "its writer took nothing",
                                self.d_idle)
        except (ConnectionError, asyncssh.Error) as e:
            said = await _last_word(self.writer_said)
            if said is not None and not said.get("ok"):
                raise _fail_from(self.dst_link, said) from None
            raise HostError(self.dst_link.name, f"the destination's stream ended during the copy "
                            f"({type(e).__name__})", "disconnected") from None

    async def _relay(self) -> list[dict]:
        """Forward frames from the reader to the writer; the source's trailer of each file."""
        assert self.reader is not None and self.writer is not None and self.writer_said is not None
        trailers = []
        src_out, dst_in = self.reader.stdout, self.writer.stdin
        if self.progress is not None:
            self.progress(0, self.total)
        for _ in self.files:
            while True:
                hdr = await self._pull(src_out.readexactly(4))
                dst_in.write(hdr)
                n = int.from_bytes(hdr, "big")
                if n == 0:
                    break
                dst_in.write(await self._pull(src_out.readexactly(n)))
                await self._push()
                if self.writer_said.done():
                    raise _fail_from(self.dst_link, self.writer_said.result())
                self.seen["bytes"] += n
                if self.progress is not None:
                    self.progress(self.seen["bytes"], self.total)
            line = await self._pull(src_out.readline())
            if not line:
                raise HostError(self.src_link.name, "the source's reader ended early", "disconnected")
            try:
                t = json.loads(line)
            except ValueError:
                raise HostError(self.src_link.name, "the source's reader sent what is not a "
                                "trailer; the stream is out of step", "helper") from None
            if not t.get("ok"):
                raise _fail_from(self.src_link, t)
            trailers.append(t)
            self.seen["files"] += 1
        return trailers

    # -- after a failure --------------------------------------------------------------------
    async def cleanup(self) -> str:
        """Stop both helpers and make sure no partial folder stays; a sentence saying so."""
        if self.cleaned is not None:
            return self.cleaned
        self.cleaned = "nothing was put in place"
        notes = []
        if self.writer is not None and not self.committed:
            # an unfinished writer removes its partial folder when its input ends
            with contextlib.suppress(Exception):
                self.writer.stdin.write_eof()
            if not await _exited(self.writer, min(5.0, self.d_idle)):
                notes.append(f"its writer on {self.dst_link.name} was stopped")
        for h in (self.reader, self.writer):
            if h is not None:
                h.close()
        if self.r_id is not None and not self.committed:
            # a closed channel says nothing of a stopped process behind it: end it by identity
            await _abandon(self.src_link, self.r_id, None)
        for h in (self.reader, self.writer):
            if h is not None:
                await _exited(h, 2.0)  # reaped here, not by a garbage collector later
        if self.writer_said is not None:
            self.writer_said.cancel()
            with contextlib.suppress(BaseException):
                await self.writer_said  # retrieved, so no "exception never retrieved" noise
        if self.committed or self.partial is None:
            self.cleaned = "; ".join(["nothing was put in place", *notes])
            return self.cleaned
        ans = await _abandon(self.dst_link, self.w_id, self.partial,
                             {"dst": self.dst_abs, "backup": self.swap["backup"]} if self.swap else None)
        if ans is None:
            gone = (f"the partial folder on {self.dst_link.name} could not be checked (the host "
                    "did not answer); the next mirror there removes it")
        elif ans.get("exists"):
            gone = f"the partial folder {shown(self.partial)} could NOT be removed"
        else:
            gone = "the partial folder was removed"
        self.cleaned = "; ".join(["nothing was put in place", gone, *self._original(ans)])
        return self.cleaned

    def _original(self, ans: dict | None) -> list[str]:
        """Where the destination being replaced is now, as its host says (a sentence)."""
        if not self.swap:
            return []
        back = shown(self.swap["backup"])
        if ans is None:
            return [f"the destination being replaced is under its name or kept as {back}"]
        if ans.get("dst_exists") and not ans.get("backup_exists"):
            return ["the destination being replaced is unchanged under its name"]
        if ans.get("backup_exists"):
            self.kept_as = self.swap["backup"]
            return [f"the destination being replaced is kept as {back}"]
        return [f"the destination being replaced was found neither under its name nor as {back}"]


async def _exited(h: HelperProcess, timeout: float) -> bool:
    try:
        await h.wait(timeout)
        return True
    except (Exception, asyncio.CancelledError):
        return False


async def _abandon(link: HostLink, ident: tuple[Any, Any] | None, partial: str | None,
                   places: dict[str, Any] | None = None) -> dict | None:
    """Kill a helper that no longer answers (pid + start time) and remove its partial folder,
    on its host, over the link's own connection; the answer, or None when the host is gone."""
    pid, start = ident if ident else (None, None)
    try:
        ans = await link.run_helper(HELPER, {"op": "abandon", "pid": pid, "start": start,
                                             "partial": partial, **(places or {})},
                                    timeout=link.host.command_timeout + 10)
    except HostError:
        return None
    return ans if isinstance(ans, dict) and ans.get("ok") else None


async def _last_word(task: asyncio.Future | None) -> dict | None:
    """What the writer said before its stream broke (a disk-full error, say), if anything."""
    if task is None:
        return None
    try:
        msg = await asyncio.wait_for(asyncio.shield(task), 2)
    except (Exception, asyncio.CancelledError):
        return None
    return msg if isinstance(msg, dict) else None


async def _which_died(src_link: HostLink, dst_link: HostLink) -> str:
    """The host that no longer answers, to name it in the error."""
    for link in (dst_link, src_link):
        try:
            await link.run(["true"], timeout=min(5.0, link.host.connect_timeout + 1))
        except HostError:
            return link.name
    return f"{src_link.name}->{dst_link.name}"


async def _recv(h: HelperProcess, link: HostLink, timeout: float | None) -> dict:
    try:
        msg = await asyncio.wait_for(h.recv_json(), timeout)
    except ShellOutputError as e:  # a login shell that prints before the helper's answer
        raise HostError(link.name, str(e), "shell-output") from None
    except ValueError as e:
        raise HostError(link.name, f"mirror helper answered what is not JSON ({e})", "helper") \
            from None
    except EOFError:
        err = (await h.read_stderr()).strip().splitlines()
        raise HostError(link.name, "mirror helper ended early" + (f": {err[-1]}" if err else ""),
                        "disconnected") from None
    return msg if isinstance(msg, dict) else {"ok": False, "error": {"code": "helper",
                                                                      "message": str(msg)[:200]}}
