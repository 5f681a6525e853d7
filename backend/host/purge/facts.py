"""Purge's facts: everything a purge is judged on, gathered on the host (the paths walked by
fd and scanned, what they free, the runs that lose a checkpoint and their keepers, the
processes and containers that use them, mounts and ZFS snapshots; each run's eval losses from
`evals`). `verdict.evaluate` judges them. Who uses the paths is read in `inuse`, the
runs that lose a checkpoint and what they keep in `keepers`; `gather` puts it all together."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import stat

from fleetdeck.backend.host.lib import fsinfo, layout, runner
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.evals import eval_facts
from fleetdeck.backend.host.purge.inuse import docker_facts, scan_proc
from fleetdeck.backend.host.purge.keepers import (
    checkpoint_keeper_facts,
    keeper_facts,
    runs_losing_checkpoints,
)
from fleetdeck.backend.host.purge.paths import (
    WalkError,
    close_fds,
    open_chain,
    scan,
    split_path,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

    from fleetdeck.backend.host.purge.wire import Facts, KeepRule


def zfs_facts(dataset: str) -> Dict[str, Any]:
    """Snapshot usage of a ZFS dataset: usedbysnapshots and how many snapshots it has."""
    exe = runner.which("zfs") or next(
        (p for p in ("/sbin/zfs", "/usr/sbin/zfs") if os.path.exists(p)), None
    )
    if not exe:
        return {"dataset": dataset, "error": "no zfs command"}
    r = runner.run([exe, "get", "-Hp", "-o", "value", "usedbysnapshots", dataset])
    if r.rc != 0:
        return {"dataset": dataset, "error": runner.first_line(r.err) or "exit %d" % r.rc}
    r2 = runner.run([exe, "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", dataset])
    return {
        "dataset": dataset,
        "usedbysnapshots": int(r.out.split()[0]) if r.out.split() else 0,
        "snapshots": len(r2.out.split()) if r2.rc == 0 else None,
    }


def gather(
    paths: Sequence[str],
    roots: Sequence[str],
    hashing: bool = True,
    keep: Optional[KeepRule] = None,
) -> Facts:
    """Every fact the purge of these paths is judged on (see `evaluate`)."""
    return gather_with_inodes(paths, roots, hashing, keep)[0]


def gather_with_inodes(
    paths: Sequence[str],
    roots: Sequence[str],
    hashing: bool,
    keep: Optional[KeepRule] = None,
) -> Tuple[Facts, List[Set[Tuple[int, int]]]]:
    """(facts, [set of (dev, ino) under each path]): the sets say what `remove_pinned` may
    remove (anything else appeared after the check)."""
    facts: Facts = {
        "paths": [],
        "roots": [],
        "keepers": [],
        "holders": [],
        "proc_unreadable": [],
        "docker": {},  # each filled below, in this order
        "evals": [],
    }
    for r in roots:
        real = os.path.realpath(os.path.expanduser(r))
        sysdir = fsinfo.system_folder(real)
        facts["roots"].append(
            {
                "given": r,
                "resolved": real,
                "refused": None
                if sysdir is None
                else "it resolves on this host to %s, a system folder, so nothing under it is "
                "purged" % shown(real),
            }
        )
    # a root that resolves to a system folder (`~` of a user whose home is /, a link) is no root
    resolved = [r["resolved"] for r in facts["roots"] if not r.get("refused")]
    index: Dict[Tuple[int, int], int] = {}
    seen_links: Dict[Tuple[int, int], int] = {}
    inodes: List[Set[Tuple[int, int]]] = []
    mounts = fsinfo.read_mounts()
    for n, given in enumerate(paths):
        pf: Dict[str, Any] = {
            "path": given,
            "abs": None,
            "error": None,
            "pins": [],
            "bytes": 0,
            "disk_bytes": 0,
            "files": 0,
            "symlinks": 0,
            "adapters": [],
            "weights_dirs": [],
            "runs": [],
            "mounts_inside": [],
            "containers": [],
            "free_bytes": None,
            "fstype": None,
            "zfs": None,
            "scan_error": None,
        }
        facts["paths"].append(pf)
        mine: Set[Tuple[int, int]] = set()
        inodes.append(mine)
        try:
            pf["abs"], comps = split_path(given)
            parent, fd, pf["pins"] = open_chain(comps)
        except WalkError as e:
            pf["error"] = [e.code, e.detail]
            continue
        if not any(fsinfo.under(pf["abs"], r) for r in resolved):
            # refused whatever it holds (`outside-roots`): not walked, so `purge host /` answers at
            # once instead of reading the whole filesystem first
            pf["outside"] = True
            close_fds(parent, fd)
            continue
        ckpts: List[str] = []
        try:
            st = os.fstat(fd)
            index.setdefault((st.st_dev, st.st_ino), n)
            mine.add((st.st_dev, st.st_ino))
            pf["disk_bytes"] += st.st_blocks * 512
            pf["free_bytes"] = fsinfo.free_bytes(fd)

            def visit(
                path: str,
                name: str,
                st: os.stat_result,
                pf: Dict[str, Any] = pf,
                n: int = n,
                ckpts: List[str] = ckpts,
                mine: Set[Tuple[int, int]] = mine,
            ) -> None:
                key = (st.st_dev, st.st_ino)
                index.setdefault(key, n)
                mine.add(key)
                seen_links[key] = seen_links.get(key, 0) + 1
                if stat.S_ISLNK(st.st_mode):
                    pf["symlinks"] += 1
                elif stat.S_ISREG(st.st_mode):
                    pf["files"] += 1
                    pf["bytes"] += st.st_size
                    # blocks come back only when every link to the inode goes
                    if seen_links[key] == st.st_nlink:
                        pf["disk_bytes"] += st.st_blocks * 512
                    if name == layout.WEIGHTS and st.st_size > 0:
                        pf["weights_dirs"].append(path.rsplit("/", 1)[0])
                if stat.S_ISDIR(st.st_mode):
                    pf["disk_bytes"] += st.st_blocks * 512
                    if name == layout.ADAPTER_DIR:
                        pf["adapters"].append(path)
                    if name == "checkpoints" or layout.looks_like_checkpoint(name):
                        ckpts.append(path)

            scan(fd, pf["abs"].rstrip("/"), visit)
        except OSError as e:
            pf["scan_error"] = "%s: %s" % (
                shown(e.filename) if isinstance(e.filename, str) else "a file",
                e.strerror,
            )
        finally:
            close_fds(parent, fd)
        pf["runs"] = runs_losing_checkpoints(comps, ckpts)
        pf["mounts_inside"] = [m for m, _, _ in fsinfo.mounts_inside(pf["abs"], mounts)] + [
            m for m, _, _ in mounts if m == pf["abs"]
        ]
        best = fsinfo.mount_of(pf["abs"], mounts)
        pf["fstype"] = best[1] if best[1] != "?" else None
        if best[1] == "zfs":
            pf["zfs"] = zfs_facts(best[2])
    tops = [p["abs"] if not p["error"] and not p.get("outside") else None for p in facts["paths"]]
    facts["holders"], facts["proc_unreadable"] = scan_proc(index, tops)
    facts["docker"] = docker_facts()
    for m in facts["docker"]["mounts"]:
        src = m["source"]
        try:
            st = os.stat(src)
            hit = index.get((st.st_dev, st.st_ino))
        except (OSError, ValueError):
            hit = None
        for n, top in enumerate(tops):
            if top and (fsinfo.under(src, top) or fsinfo.under(top, src) or hit == n):
                facts["paths"][n]["containers"].append(m)
    runs = sorted({r for p in facts["paths"] for r in p["runs"]})
    facts["keepers"] = [
        checkpoint_keeper_facts(r, keep["kept"], index, hashing)
        if keep and r == keep["run"]
        else keeper_facts(r, index, hashing)
        for r in runs
    ]
    facts["evals"] = [
        eval_facts(
            k["run"],
            keep if keep and k["run"] == keep["run"] else None,
            tops,
            {f["path"]: f["sha256"] for f in k["files"]},
        )
        for k in facts["keepers"]
    ]
    return facts, inodes
