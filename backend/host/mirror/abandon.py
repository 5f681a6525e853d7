"""Partial folders whose writer is gone: a writer's partial folder is named for it
(`PID-START-RANDOM`), so the next writer removes those of writers that no longer run
(`clean_stale`), and `abandon` stops a reader or writer that no longer answers and removes the
partial folder it was filling, reached from / without following a link."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import signal
import time
from typing import List, Optional, Tuple

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.text import fsdec, fsenc
from fleetdeck.backend.host.mirror.common import (
    PARTIAL,
    ChainError,
    kind_of,
    open_dir_chain,
)
from fleetdeck.backend.host.mirror.fdops import remove_tree_at, stat_at
from fleetdeck.backend.host.mirror.wire import Abandoned, AbandonRequest


def partial_in_use(name_rest: bytes) -> bool:
    """True when the writer named in a partial folder's name (`PID-START-RANDOM`) still runs.

    The one identity rule (pid and start ticks) says whether it is the same process; a name
    from an older writer (`PID-RANDOM`, no start time) is in use only while that pid is a
    live fleetdeck helper."""
    parts = name_rest.split(b"-")
    try:
        pid = int(parts[0])
        start = int(parts[1]) if len(parts) >= 3 else None
    except (ValueError, IndexError):
        return True  # not a name we made: leave it alone
    if pid == os.getpid():
        return True
    if start is None:
        return procfs.alive(pid) and procfs.has_helper_marker(pid)
    if not procfs.same_process(pid, start):
        return False
    # another user's helper hides its environment from us: keep its folder
    return procfs.has_helper_marker(pid) or procfs.uid(pid) != os.getuid()


def clean_stale(dir_fd: int, prefix: bytes, where: bytes) -> List[str]:
    """Remove the partial folders in the open folder `dir_fd` whose writer is gone; their
    paths (`where` is that folder's path, for the answer)."""
    removed: List[str] = []
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return removed
    for n in names:
        name = os.fsencode(n)
        if not name.startswith(prefix) or partial_in_use(name[len(prefix) :]):
            continue
        if kind_of(stat_at(dir_fd, name)) == "dir":
            remove_tree_at(dir_fd, name)
            removed.append(fsdec(os.path.join(where, name)))
    return removed


def kind_by_chain(path: bytes) -> Tuple[Optional[str], Optional[str]]:
    """(kind of what is at the absolute path `path`, its folder walked from / without following
    a link) or (None, sentence) when that folder cannot be walked so."""
    head, name = os.path.split(path)
    try:
        fd = open_dir_chain(head)
    except ChainError as e:
        return None, e.detail
    try:
        return kind_of(stat_at(fd, name)), None
    finally:
        os.close(fd)


def op_abandon(req: AbandonRequest) -> Abandoned:
    """Stop a reader or writer that no longer answers (identified by pid AND start time, and
    the helper marker) and remove the partial folder that writer was filling: only a folder
    whose name says that writer made it, once that writer is gone, reached from / without
    following a link (`blocked` says why not, when a link or a missing folder is on the way:
    `exists` is then null, not known)."""
    pid, start = req.get("pid"), req.get("start")
    killed = False
    if isinstance(pid, int) and procfs.same_process(pid, start) and procfs.has_helper_marker(pid):
        try:
            os.kill(pid, signal.SIGKILL)  # a stopped (SIGSTOP) process dies of it too
            killed = True
        except OSError:
            pass
        for _ in range(200):
            if not procfs.same_process(pid, start):
                break
            time.sleep(0.05)
    removed, blocked = None, None
    exists: Optional[bool] = False
    given = req.get("partial")
    path = fsenc(given) if given else None
    if path is not None and os.path.isabs(path):
        head, base = os.path.split(path)
        try:
            hfd = open_dir_chain(head)
        except ChainError as e:
            exists, blocked = None, e.detail
        else:
            try:
                rest = base.partition(PARTIAL)[2]
                if (
                    isinstance(pid, int)
                    and isinstance(start, int)
                    and rest.startswith(b"%d-%d-" % (pid, start))
                    and not partial_in_use(rest)
                    and kind_of(stat_at(hfd, base)) == "dir"
                ):
                    remove_tree_at(hfd, base)
                    removed = fsdec(path)
                exists = stat_at(hfd, base) is not None
            finally:
                os.close(hfd)
    # a replace: where the original destination is now, under its name or its backup's
    dst, backup = req.get("dst"), req.get("backup")
    dst_exists, why_dst = _folder_at(dst) if dst else (None, None)
    backup_exists, why_backup = _folder_at(backup) if backup else (None, None)
    answer: Abandoned = {
        "killed": killed,
        "removed": removed,
        "blocked": blocked or why_dst or why_backup,
        "gone": not procfs.same_process(pid, start) if isinstance(pid, int) else True,
        "exists": exists,
    }
    if dst:
        answer["dst_exists"] = dst_exists
    if backup:
        answer["backup_exists"] = backup_exists
    return answer


def _folder_at(path: str) -> Tuple[Optional[bool], Optional[str]]:
    """(whether `path`, reached from / without following a link, is a folder (None: it cannot
    be told), the sentence saying why not)."""
    kind, why = kind_by_chain(fsenc(path))
    return (None if why else kind == "dir"), why
