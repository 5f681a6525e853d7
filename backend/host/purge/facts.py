"""Purge's facts: everything a purge is judged on, gathered on the host (the paths walked by
fd and scanned, what they free, the runs that lose a checkpoint and their keepers, the
processes and containers that use them, mounts and ZFS snapshots; each run's eval losses from
`evals`). `verdict.evaluate` judges them."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import stat

from fleetdeck.backend.host.lib import docker, fsinfo, layout, procfs, runner
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.evals import eval_facts
from fleetdeck.backend.host.purge.paths import (
    WalkError,
    close_fds,
    open_chain,
    scan,
    sha256_file,
    split_path,
)

GONE = (errno.ENOENT, errno.ESRCH)


def docker_facts():
    """Every container's mounts (stopped ones too), or why the engine could not be asked."""
    q = docker.query(all_containers=True, errors="surrogateescape")
    if not q["exe"]:
        return {"present": False, "state": "absent", "mounts": []}
    if q["failed"] in (None, "json"):
        if not q["ids"]:
            return {"present": True, "state": "ok", "containers": 0, "mounts": []}
        mounts = []
        try:
            if q["failed"]:
                raise q["error"]
            for c in q["docs"]:
                for m in c.get("Mounts") or []:
                    mounts.append(
                        {
                            "id": c.get("Id", "")[:12],
                            "name": c.get("Name", "").lstrip("/"),
                            "source": m.get("Source") or "",
                            "destination": m.get("Destination"),
                            "running": bool((c.get("State") or {}).get("Running")),
                        }
                    )
        except (ValueError, AttributeError, TypeError) as e:
            return {
                "present": True,
                "state": "error",
                "error": "docker inspect: %s" % e,
                "mounts": [],
            }
        return {"present": True, "state": "ok", "containers": len(q["ids"]), "mounts": mounts}
    r = q["result"]
    text = r.err.decode("utf-8", "replace").strip()
    # judged on the line about the daemon: a config-file warning may say "permission denied" too
    daemon = next(
        (ln for ln in reversed(text.splitlines()) if "docker daemon" in ln.lower()), ""
    ).lower()
    # a daemon that is not running runs no container; one we may not ask might run many
    state = (
        "denied"
        if "permission denied" in daemon
        else ("down" if "cannot connect to the docker daemon" in daemon else "error")
    )
    return {
        "present": True,
        "state": state,
        "error": text.splitlines()[-1] if text else "exit %d" % r.rc,
        "mounts": [],
    }


def zfs_facts(dataset):
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


def _readlink(p):
    try:
        return os.readlink(p)
    except OSError:
        return None


def scan_proc(index, tops):
    """Processes using anything in `index` ((dev, ino) -> path number): open fds, mappings
    (device and inode; a name under a purged path also counts), cwd and root."""
    me = os.getpid()
    holders, unreadable = [], []
    ancestors = set(procfs.ancestors())

    def hold(key, name, pid, how, what):
        i = index.get(key)
        if i is None and name is not None:
            i = next((n for n, t in enumerate(tops) if t and fsinfo.under(name, t)), None)
        if i is not None:
            holders.append(
                {"index": i, "pid": pid, "how": how, "file": what, "comm": procfs.comm(pid)}
            )

    for pid in procfs.pids():
        if pid == me or procfs.is_kernel_thread(pid):
            continue
        base = "/proc/%d" % pid
        try:
            for how in ("cwd", "root"):
                st = os.stat(base + "/" + how)
                hold((st.st_dev, st.st_ino), None, pid, how, _readlink(base + "/" + how))
            for fdname in os.listdir(base + "/fd"):
                try:
                    st = os.stat(base + "/fd/" + fdname)
                except OSError as e:
                    if e.errno in GONE:
                        continue
                    raise
                target = _readlink(base + "/fd/" + fdname)
                name = target[:-10] if target and target.endswith(" (deleted)") else target
                hold(
                    (st.st_dev, st.st_ino),
                    name if name and name.startswith("/") else None,
                    pid,
                    "fd",
                    target,
                )
            for line in procfs.read_bytes(base + "/maps", limit=1 << 26).splitlines():
                parts = line.split(None, 5)
                if len(parts) < 5 or parts[4] == b"0":
                    continue
                major, minor = parts[3].split(b":")
                name = os.fsdecode(parts[5].strip()) if len(parts) > 5 else None
                if name and name.endswith(" (deleted)"):
                    name = name[:-10]
                hold(
                    (os.makedev(int(major, 16), int(minor, 16)), int(parts[4])),
                    name,
                    pid,
                    "maps",
                    name,
                )
        except OSError as e:
            if e.errno in GONE:
                continue
            unreadable.append(
                {
                    "pid": pid,
                    "comm": procfs.comm(pid),
                    "ancestor": pid in ancestors,
                    "error": "%s: %s" % (e.filename or base, e.strerror),
                }
            )
    seen, uniq = set(), []
    for h in holders:
        k = (h["index"], h["pid"], h["how"], h["file"])
        if k not in seen:
            seen.add(k)
            uniq.append(h)
    return uniq, unreadable


def runs_losing_checkpoints(comps, ckpt_dirs):
    """Runs that lose a checkpoint (the layout's `run_of`): from the path's own components,
    then from checkpoint folders found inside it."""
    runs = []
    for c in [comps] + [[x for x in d.split("/") if x] for d in ckpt_dirs]:
        run = layout.run_of(c)
        if run:
            runs.append("/" + "/".join(run))
    return sorted(set(runs))


def keeper_visitor(k, index):
    """The `scan` visitor that records a keeper's files into `k`: each regular file's identity,
    a symlink inside it as its error, and whether any of it is an inode of what is purged."""

    def visit(path, name, st):
        if (st.st_dev, st.st_ino) in index:
            k["in_purge"] = True
        if stat.S_ISLNK(st.st_mode):
            k["error"] = "%s inside it is a symlink" % shown(path)
        elif stat.S_ISREG(st.st_mode):
            k["files"].append(
                {
                    "path": path,
                    "bytes": st.st_size,
                    "dev": st.st_dev,
                    "ino": st.st_ino,
                    "nlink": st.st_nlink,
                    "mtime_ns": st.st_mtime_ns,
                    "sha256": None,
                }
            )

    return visit


def keeper_facts(run, index, hashing):
    """The run's final adapter as the layout defines it (`<run>/adapter/`, else the run root
    as HF's save_model leaves it), walked without following links: every kept file's identity
    and (when `hashing`) sha256, and whether any of it is an inode of what is purged."""
    where = layout.final_adapter(run)
    k = {
        "run": run,
        "adapter": where or run.rstrip("/") + "/" + layout.ADAPTER_DIR,
        "error": None,
        "files": [],
        "in_purge": False,
        "dir": None,
    }
    if where is None:
        k["error"] = layout.final_adapter_problem(run) or "no final adapter"
        return k
    try:
        parent, fd, pins = open_chain([c for c in where.split("/") if c])
    except WalkError as e:
        k["error"] = "%s: %s" % (shown(where), e.detail)
        return k
    try:
        k["dir"] = pins[-1]
        why = layout.adapter_problem_at(fd)  # judged again on the folder that is walked
        if why:
            k["error"] = "%s: %s" % (shown(where), why)
            return k
        k["in_purge"] = any(tuple(p) in index for p in pins)

        visit = keeper_visitor(k, index)

        if where == run:  # HF's root-level adapter: the two files are the keeper, not the run
            for name in (layout.WEIGHTS, layout.CONFIG):
                visit(
                    where.rstrip("/") + "/" + name,
                    name,
                    os.stat(name, dir_fd=fd, follow_symlinks=False),
                )
        else:
            scan(fd, where, visit)
        if hashing:
            for f in k["files"]:
                f["sha256"] = sha256_file(f["path"])
    except (OSError, WalkError) as e:
        k["error"] = "%s cannot be read: %s" % (shown(where), e)
    finally:
        close_fds(parent, fd)
    return k


def keep_newest(run_given, n):
    """The keep rule of a run without a final adapter: its checkpoints (layout's one rule),
    the newest `n` complete ones kept, the complete ones older than those to purge as literal
    paths; incomplete ones (a save killed half-way) are named and left where they are.
    {"run", "n", "checkpoints": [[step, path]], "incomplete": [[step, path, why]], "kept",
    "purge", "ignored": [[name, why]], "error": [code, sentence]}."""
    out = {
        "given": run_given,
        "run": None,
        "n": n,
        "checkpoints": [],
        "incomplete": [],
        "ignored": [],
        "kept": [],
        "purge": [],
        "error": None,
    }
    if not isinstance(run_given, str) or not run_given:
        out["error"] = ["bad-keep", "a keep rule names the run folder"]
        return out
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        out["error"] = ["bad-keep", "the number of checkpoints to keep must be 1 or more"]
        return out
    try:
        out["run"], comps = split_path(run_given)
        parent, fd, _ = open_chain(comps)
        close_fds(parent, fd)
    except WalkError as e:
        out["error"] = [e.code, "the run %s: %s" % (shown(run_given), e.detail)]
        return out
    found = sorted(layout.checkpoints(out["run"]), key=lambda c: (c[0], c[1]))
    out["checkpoints"] = [[step, path] for step, path in found]
    for base in (out["run"], out["run"].rstrip("/") + "/checkpoints"):
        try:
            out["ignored"] += [
                [base.rstrip("/") + "/" + name, why]
                for name, why in layout.odd_checkpoint_names(os.listdir(base))
            ]
        except OSError:
            pass
    complete = []
    for step, path in found:
        why = layout.checkpoint_problem(path)
        if why:
            out["incomplete"].append([step, path, why])
        else:
            complete.append((step, path))
    if not found:
        out["error"] = [
            "no-checkpoints",
            "%s holds no checkpoint-<step> folder (in it or in its "
            "checkpoints/)" % shown(out["run"]),
        ]
    elif len(complete) < n:
        out["error"] = [
            "no-keeper",
            "%s has %d complete checkpoint(s), fewer than the %d to keep%s; "
            "nothing is deleted" % (shown(out["run"]), len(complete), n, _incomplete_list(out)),
        ]
    elif len(complete) == n:
        out["error"] = [
            "nothing-to-free",
            "%s has %d complete checkpoint(s) and the newest %d are kept: "
            "nothing would be deleted%s"
            % (shown(out["run"]), len(complete), n, _incomplete_list(out)),
        ]
    else:
        out["kept"] = [path for _, path in complete[-n:]]
        out["purge"] = [path for _, path in complete[:-n]]
    return out


def _incomplete_list(rule):
    """ "; incomplete (left alone): checkpoint-400 (trainer_state.json only), ..." or ""."""
    if not rule["incomplete"]:
        return ""
    return "; incomplete, left where they are: %s" % ", ".join(
        "%s (%s)"
        % (
            shown(path.rsplit("/", 1)[-1]),
            why[len("incomplete: ") :] if why.startswith("incomplete: ") else why,
        )
        for _, path, why in rule["incomplete"][:5]
    ) + (" and %d more" % (len(rule["incomplete"]) - 5) if len(rule["incomplete"]) > 5 else "")


def checkpoint_keeper_facts(run, kept, index, hashing):
    """The kept checkpoints of a run purged by the keep rule, in the shape of `keeper_facts`:
    every file in them (walked without following links), hashed when `hashing`, and whether
    any of it is an inode of what is purged. `dirs` pins each kept folder."""
    k = {
        "run": run,
        "adapter": ", ".join(shown(p) for p in kept),
        "error": None,
        "files": [],
        "in_purge": False,
        "dir": None,
        "dirs": [],
        "kind": "checkpoints",
    }
    for where in kept:
        try:
            parent, fd, pins = open_chain([c for c in where.split("/") if c])
        except WalkError as e:
            k["error"] = "%s: %s" % (shown(where), e.detail)
            return k
        try:
            k["dirs"].append(pins[-1])
            if any(tuple(p) in index for p in pins):
                k["in_purge"] = True
            why = layout.checkpoint_problem_at(fd)  # judged again on the folder that is walked
            if why:
                k["error"] = "%s is not a complete checkpoint (%s)" % (shown(where), why)
                return k
            scan(fd, where, keeper_visitor(k, index))
        except (OSError, WalkError) as e:
            k["error"] = "%s cannot be read: %s" % (shown(where), e)
        finally:
            close_fds(parent, fd)
        if k["error"]:
            return k
    if hashing:
        for f in k["files"]:
            f["sha256"] = sha256_file(f["path"])
    return k


def gather(paths, roots, hashing=True, keep=None):
    """Every fact the purge of these paths is judged on (see `evaluate`)."""
    return gather_with_inodes(paths, roots, hashing, keep)[0]


def gather_with_inodes(paths, roots, hashing, keep=None):
    """(facts, [set of (dev, ino) under each path]): the sets say what `remove_pinned` may
    remove (anything else appeared after the check)."""
    facts = {"paths": [], "roots": [], "keepers": [], "holders": [], "proc_unreadable": []}
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
    index, seen_links, inodes = {}, {}, []
    mounts = fsinfo.read_mounts()
    for n, given in enumerate(paths):
        pf = {
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
        mine = set()
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
        ckpts = []
        try:
            st = os.fstat(fd)
            index.setdefault((st.st_dev, st.st_ino), n)
            mine.add((st.st_dev, st.st_ino))
            pf["disk_bytes"] += st.st_blocks * 512
            pf["free_bytes"] = fsinfo.free_bytes(fd)

            def visit(path, name, st, pf=pf, n=n, ckpts=ckpts, mine=mine):
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
