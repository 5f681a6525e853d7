"""The purge helper: runs on the purged host (stdlib + the host library, Python 3.8+).

Requests (JSON on stdin, answered through `serve`):

- `{"op": "check", "paths": [...], "roots": [...]}` gathers the facts a purge is judged on;
- `{"op": "check", "keep": {"run", "n"}, "roots": [...]}` does the same for a run that keeps its
  newest N checkpoints instead of a final adapter: the paths are its older checkpoints, the
  keepers every file of the N kept ones (`keep_newest`);
- `{"op": "execute", "paths", "roots", "plan": {"pins", "keepers"}, ["keep"]}` gathers them again,
  refuses everything if any path fails a check or moved since the plan (pins of every
  component, keeper files), and otherwise removes one path at a time with `remove_pinned`,
  then hashes the keepers again.

The controller imports this module for `evaluate`, so both sides judge with the same code.
Keepers are judged by the host library's one final-adapter rule (`layout`).
"""
# It runs on the host's Python 3.8 or newer: %-formatting stays.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import stat
import sys

from fleetdeck.backend.host.lib import fsinfo, layout, procfs, runner
from fleetdeck.backend.host.lib.hashing import sha256_at
from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.lib.text import fsenc, shown

DIR_FLAGS = layout.DIR_FLAGS
WALK_CODES = ("not-absolute", "not-normalized", "not-found", "symlink", "not-directory", "unreadable")
CHECKS = WALK_CODES + ("overlapping", "outside-roots", "is-root", "holds-final-adapter", "in-use",
                       "container-mount", "container-unknown", "mounted", "no-keeper")
GONE = (errno.ENOENT, errno.ESRCH)
PRIVATE_PREFIX = ".fleetdeck-purge-"
RENAME_NOREPLACE = 1


class WalkError(Exception):
    """A path that cannot be walked (or removed) safely: `code` is a refusal code."""

    def __init__(self, code, detail):
        Exception.__init__(self, detail)
        self.code = code
        self.detail = detail


def split_path(given):
    """(absolute path, components): `~` expands here, '.'/'..' and relative paths refuse."""
    p = os.path.expanduser(given) if given.startswith("~") else given
    if not p.startswith("/"):
        raise WalkError("not-absolute", "it is not an absolute path")
    comps = [c for c in p.split("/") if c]
    if any(c in (".", "..") for c in comps):
        raise WalkError("not-normalized", "it has '.' or '..' components")
    return "/" + "/".join(comps), comps


def _why(parent_fd, name, last, err):
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return "not-found", "%s does not exist" % shown(name)
        return "unreadable", "%s cannot be read: %s" % (shown(name), e.strerror)
    if stat.S_ISLNK(st.st_mode):
        return "symlink", "component %s is a symlink" % shown(name)
    if not stat.S_ISDIR(st.st_mode):
        if last:
            return "not-directory", "it is not a directory"
        return "not-found", "component %s is not a directory" % shown(name)
    return "unreadable", "%s cannot be opened: %s" % (shown(name), err.strerror)


def open_chain(comps, pins=None):
    """Open / then each component with O_NOFOLLOW; (parent_fd, fd, pins). `pins` given: any
    component whose (dev, ino) differs raises WalkError('changed-since-check')."""
    fd = os.open("/", DIR_FLAGS)
    parent = None
    st = os.fstat(fd)
    got = [[st.st_dev, st.st_ino]]
    try:
        if pins is not None and (not pins or list(pins[0]) != got[0]):
            raise WalkError("changed-since-check", "/ is not the folder checked")
        for i, name in enumerate(comps):
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                code, detail = _why(fd, name, i == len(comps) - 1, e)
                raise WalkError(code, detail) from None
            if parent is not None:
                os.close(parent)
            parent, fd = fd, nfd
            st = os.fstat(fd)
            got.append([st.st_dev, st.st_ino])
            if pins is not None and (len(pins) < len(got) or list(pins[len(got) - 1]) != got[-1]):
                raise WalkError("changed-since-check", "component %s is not the folder checked" % shown(name))
    except BaseException:
        _close(parent, fd)
        raise
    return parent, fd, got


def _close(*fds):
    for fd in fds:
        if fd is not None:
            os.close(fd)


def scan(fd, path, visit):
    """Call visit(path, name, lstat) for every entry under the open directory, depth first,
    never following a link; a sub-folder swapped between lstat and open raises OSError."""
    with os.scandir(fd) as it:
        names = [e.name for e in it]
    for name in names:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        child = path + "/" + name
        visit(child, name, st)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            try:
                sst = os.fstat(sub)
                if (sst.st_dev, sst.st_ino) != (st.st_dev, st.st_ino):
                    raise OSError(errno.ESTALE, "%s changed while scanned" % shown(child))
                scan(sub, child, visit)
            finally:
                os.close(sub)


def docker_facts():
    """Every container's mounts, or why the engine could not be asked."""
    exe = runner.which("docker")
    if not exe:
        return {"present": False, "state": "absent", "mounts": []}
    r = runner.run([exe, "ps", "-a", "-q", "--no-trunc"])
    if r.rc == 0:
        ids = r.out.decode("ascii", "replace").split()
        if not ids:
            return {"present": True, "state": "ok", "containers": 0, "mounts": []}
        r = runner.run([exe, "inspect"] + ids)
        if r.rc == 0:
            mounts = []
            try:
                for c in json.loads(r.out.decode("utf-8", "surrogateescape")):
                    for m in c.get("Mounts") or []:
                        mounts.append({"id": c.get("Id", "")[:12], "name": c.get("Name", "").lstrip("/"),
                                       "source": m.get("Source") or "", "destination": m.get("Destination"),
                                       "running": bool((c.get("State") or {}).get("Running"))})
            except (ValueError, AttributeError, TypeError) as e:
                return {"present": True, "state": "error", "error": "docker inspect: %s" % e, "mounts": []}
            return {"present": True, "state": "ok", "containers": len(ids), "mounts": mounts}
    text = r.err.decode("utf-8", "replace").strip()
    # judged on the line about the daemon: a config-file warning may say "permission denied" too
    daemon = next((ln for ln in reversed(text.splitlines()) if "docker daemon" in ln.lower()), "").lower()
    # a daemon that is not running runs no container; one we may not ask might run many
    state = "denied" if "permission denied" in daemon else (
        "down" if "cannot connect to the docker daemon" in daemon else "error")
    return {"present": True, "state": state, "error": text.splitlines()[-1] if text else "exit %d" % r.rc,
            "mounts": []}


def zfs_facts(dataset):
    """Snapshot usage of a ZFS dataset: usedbysnapshots and how many snapshots it has."""
    exe = runner.which("zfs") or next((p for p in ("/sbin/zfs", "/usr/sbin/zfs") if os.path.exists(p)), None)
    if not exe:
        return {"dataset": dataset, "error": "no zfs command"}
    r = runner.run([exe, "get", "-Hp", "-o", "value", "usedbysnapshots", dataset])
    if r.rc != 0:
        return {"dataset": dataset, "error": runner.first_line(r.err) or "exit %d" % r.rc}
    r2 = runner.run([exe, "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", dataset])
    return {"dataset": dataset, "usedbysnapshots": int(r.out.split()[0]) if r.out.split() else 0,
            "snapshots": len(r2.out.split()) if r2.rc == 0 else None}


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
            holders.append({"index": i, "pid": pid, "how": how, "file": what, "comm": procfs.comm(pid)})

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
                hold((st.st_dev, st.st_ino), name if name and name.startswith("/") else None, pid, "fd", target)
            for line in procfs.read_bytes(base + "/maps", limit=1 << 26).splitlines():
                parts = line.split(None, 5)
                if len(parts) < 5 or parts[4] == b"0":
                    continue
                major, minor = parts[3].split(b":")
                name = os.fsdecode(parts[5].strip()) if len(parts) > 5 else None
                if name and name.endswith(" (deleted)"):
                    name = name[:-10]
                hold((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])), name, pid, "maps", name)
        except OSError as e:
            if e.errno in GONE:
                continue
            unreadable.append({"pid": pid, "comm": procfs.comm(pid), "ancestor": pid in ancestors,
                               "error": "%s: %s" % (e.filename or base, e.strerror)})
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


def _keeper_visitor(k, index):
    """The `scan` visitor that records a keeper's files into `k`: each regular file's identity,
    a symlink inside it as its error, and whether any of it is an inode of what is purged."""
    def visit(path, name, st):
        if (st.st_dev, st.st_ino) in index:
            k["in_purge"] = True
        if stat.S_ISLNK(st.st_mode):
            k["error"] = "%s inside it is a symlink" % shown(path)
        elif stat.S_ISREG(st.st_mode):
            k["files"].append({"path": path, "bytes": st.st_size, "dev": st.st_dev, "ino": st.st_ino,
                               "nlink": st.st_nlink, "mtime_ns": st.st_mtime_ns, "sha256": None})
    return visit


def keeper_facts(run, index, hashing):
    """The run's final adapter as the layout defines it (`<run>/adapter/`, else the run root
    as HF's save_model leaves it), walked without following links: every kept file's identity
    and (when `hashing`) sha256, and whether any of it is an inode of what is purged."""
    where = layout.final_adapter(run)
    k = {"run": run, "adapter": where or run.rstrip("/") + "/" + layout.ADAPTER_DIR, "error": None,
         "files": [], "in_purge": False, "dir": None}
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

        visit = _keeper_visitor(k, index)

        if where == run:  # HF's root-level adapter: the two files are the keeper, not the run
            for name in (layout.WEIGHTS, layout.CONFIG):
                visit(where.rstrip("/") + "/" + name, name, os.stat(name, dir_fd=fd, follow_symlinks=False))
        else:
            scan(fd, where, visit)
        if hashing:
            for f in k["files"]:
                f["sha256"] = sha256_file(f["path"])
    except (OSError, WalkError) as e:
        k["error"] = "%s cannot be read: %s" % (shown(where), e)
    finally:
        _close(parent, fd)
    return k


def keep_newest(run_given, n):
    """The keep rule of a run without a final adapter: its checkpoints (layout's one rule),
    the newest `n` by step kept, the others to purge as literal paths. {"run", "n",
    "checkpoints": [[step, path]], "kept": [...], "purge": [...], "error": [code, sentence]}."""
    out = {"given": run_given, "run": None, "n": n, "checkpoints": [], "kept": [], "purge": [], "error": None}
    if not isinstance(run_given, str) or not run_given:
        out["error"] = ["bad-keep", "a keep rule names the run folder"]
        return out
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        out["error"] = ["bad-keep", "the number of checkpoints to keep must be 1 or more"]
        return out
    try:
        out["run"], comps = split_path(run_given)
        parent, fd, _ = open_chain(comps)
        _close(parent, fd)
    except WalkError as e:
        out["error"] = [e.code, "the run %s: %s" % (shown(run_given), e.detail)]
        return out
    found = sorted(layout.checkpoints(out["run"]), key=lambda c: (c[0], c[1]))
    out["checkpoints"] = [[step, path] for step, path in found]
    if not found:
        out["error"] = ["no-checkpoints", "%s holds no checkpoint-<step> folder (in it or in its "
                        "checkpoints/)" % shown(out["run"])]
    elif len(found) <= n:
        out["error"] = ["nothing-to-free", "%s has %d checkpoint(s) and the newest %d are kept: nothing "
                        "would be deleted" % (shown(out["run"]), len(found), n)]
    else:
        out["kept"] = [path for _, path in found[-n:]]
        out["purge"] = [path for _, path in found[:-n]]
    return out


def checkpoint_keeper_facts(run, kept, index, hashing):
    """The kept checkpoints of a run purged by the keep rule, in the shape of `keeper_facts`:
    every file in them (walked without following links), hashed when `hashing`, and whether
    any of it is an inode of what is purged. `dirs` pins each kept folder."""
    k = {"run": run, "adapter": ", ".join(shown(p) for p in kept), "error": None, "files": [],
         "in_purge": False, "dir": None, "dirs": [], "kind": "checkpoints"}
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
            scan(fd, where, _keeper_visitor(k, index))
        except (OSError, WalkError) as e:
            k["error"] = "%s cannot be read: %s" % (shown(where), e)
        finally:
            _close(parent, fd)
        if k["error"]:
            return k
    if hashing:
        for f in k["files"]:
            f["sha256"] = sha256_file(f["path"])
    return k


def sha256_file(path):
    """sha256 of the file at an absolute path walked with O_NOFOLLOW."""
    comps = [c for c in path.split("/") if c]
    parent, fd, _ = open_chain(comps[:-1])
    try:
        return sha256_at(fd, comps[-1])
    finally:
        _close(parent, fd)


def gather(paths, roots, hashing=True, keep=None):
    """Every fact the purge of these paths is judged on (see `evaluate`)."""
    return _gather(paths, roots, hashing, keep)[0]


def _gather(paths, roots, hashing, keep=None):
    """(facts, [set of (dev, ino) under each path]): the sets say what `remove_pinned` may
    remove (anything else appeared after the check)."""
    facts = {"paths": [], "roots": [], "keepers": [], "holders": [], "proc_unreadable": []}
    for r in roots:
        facts["roots"].append({"given": r, "resolved": os.path.realpath(os.path.expanduser(r))})
    resolved = [r["resolved"] for r in facts["roots"]]
    index, seen_links, inodes = {}, {}, []
    mounts = fsinfo.read_mounts()
    for n, given in enumerate(paths):
        pf = {"path": given, "abs": None, "error": None, "pins": [], "bytes": 0, "disk_bytes": 0,
              "files": 0, "symlinks": 0, "adapters": [], "weights_dirs": [], "runs": [], "mounts_inside": [],
              "containers": [], "free_bytes": None, "fstype": None, "zfs": None, "scan_error": None}
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
            _close(parent, fd)
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
                    if name == "checkpoints" or layout.checkpoint_step(name) is not None:
                        ckpts.append(path)

            scan(fd, pf["abs"].rstrip("/"), visit)
        except OSError as e:
            pf["scan_error"] = "%s: %s" % (shown(e.filename) if isinstance(e.filename, str) else "a file",
                                           e.strerror)
        finally:
            _close(parent, fd)
        pf["runs"] = runs_losing_checkpoints(comps, ckpts)
        pf["mounts_inside"] = [m for m, _, _ in fsinfo.mounts_inside(pf["abs"], mounts)] + \
            [m for m, _, _ in mounts if m == pf["abs"]]
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
    facts["keepers"] = [checkpoint_keeper_facts(r, keep["kept"], index, hashing)
                        if keep and r == keep["run"] else keeper_facts(r, index, hashing) for r in runs]
    return facts, inodes


def _below_root(abs_path, roots):
    top = next((r for r in roots if fsinfo.under(abs_path, r)), "/")
    return [c for c in abs_path[len(top.rstrip("/")):].split("/") if c]


def _is_final_adapter(abs_path, roots, holds_weights=False):
    """True when abs_path is or lies in a run's final adapter: an `adapter` component below the
    purge root, or (`holds_weights`) a folder holding the weights, with no checkpoint component
    before it."""
    for c in _below_root(abs_path, roots):
        if c == "checkpoints" or layout.checkpoint_step(c) is not None:
            return False
        if c == layout.ADAPTER_DIR:
            return True
    return holds_weights


def evaluate(facts):
    """Judge gathered facts (pure): per path, the refusals [[code, sentence]] and checks
    {code: pass|fail|skipped}; plus warnings for the whole purge."""
    roots = [r["resolved"] for r in facts["roots"]]
    warnings, out = [], []
    keepers = {k["run"]: k for k in facts["keepers"]}
    docker = facts.get("docker") or {"state": "absent"}
    if docker["state"] == "down":
        warnings.append("docker is installed but its engine is not running (%s): no container runs "
                        "now, stopped containers could not be inspected" % shown(docker.get("error")))
    for u in facts["proc_unreadable"]:
        if u["ancestor"]:
            # it started this check and waits on it (init, sshd, the controller): reported, not counted
            warnings.append("process %d (%s) cannot be read (%s); it is an ancestor of this check, so it "
                            "is not counted as a user of the paths" % (u["pid"], shown(u["comm"]), shown(u["error"])))
    for n, p in enumerate(facts["paths"]):
        ref = []
        if p["error"]:
            ref.append(p["error"])
            out.append({"refusals": ref, "checks": _checks(ref, skipped=True)})
            continue
        a = p["abs"]
        other = next((q["abs"] for m, q in enumerate(facts["paths"]) if m != n and q["abs"] and
                      (q["abs"] == a and m < n or fsinfo.under(a, q["abs"]) and q["abs"] != a)), None)
        if other:
            ref.append(["overlapping", "it is the same as, or lies inside, %s, also listed; list each folder "
                        "once" % shown(other)])
        if p["scan_error"]:
            ref.append(["unreadable", "part of it cannot be read (%s), so it cannot be checked" % p["scan_error"]])
        if a in roots:
            ref.append(["is-root", "it is the purge root itself; only folders inside a root can be purged"])
        elif not any(fsinfo.under(a, r) for r in roots):
            ref.append(["outside-roots", "it is outside every purge root (%s)" % (", ".join(
                "%s -> %s" % (shown(r["given"]), shown(r["resolved"])) for r in facts["roots"]) or "none set")])
        if p.get("outside"):
            # never walked: the checks that read its contents were not made
            out.append({"refusals": ref, "checks": _checks(ref, skipped=True)})
            continue
        adapters = [x for x in [a] + p["adapters"] if _is_final_adapter(x, roots)] + \
            [x for x in p.get("weights_dirs", []) if _is_final_adapter(x, roots, holds_weights=True)]
        if adapters:
            ref.append(["holds-final-adapter", "it is or holds a run's final adapter (%s)" % shown(adapters[0])])
        held = [h for h in facts["holders"] if h["index"] == n]
        blind = [u for u in facts["proc_unreadable"] if not u["ancestor"]]
        if held:
            ref.append(["in-use", "in use: " + "; ".join("pid %d (%s) %s %s" % (
                h["pid"], shown(h["comm"]), {"fd": "has open", "maps": "maps", "cwd": "has its cwd in",
                                             "root": "has its root in"}[h["how"]], shown(h["file"] or "?"))
                for h in held[:3]) + (" and %d more" % (len(held) - 3) if len(held) > 3 else "")])
        elif blind:
            ref.append(["in-use", "cannot tell whether it is in use: %d process(es) cannot be read (%s); run "
                        "as a user who can read every /proc entry" % (len(blind), shown(blind[0]["error"]))])
        if p["containers"]:
            c = p["containers"][0]
            ref.append(["container-mount", "container %s (%s) mounts %s at %s" % (
                shown(c["name"] or c["id"]), "running" if c["running"] else "stopped", shown(c["source"]),
                shown(c["destination"] or "?"))])
        if docker["state"] in ("denied", "error"):
            ref.append(["container-unknown", "docker is installed but could not be asked which containers "
                        "mount it (%s)" % shown(docker.get("error") or "")])
        if p["mounts_inside"]:
            ref.append(["mounted", "a filesystem is mounted at %s" % shown(p["mounts_inside"][0])])
        for run in p["runs"]:
            k = keepers.get(run)
            why = None
            if k is None or k["error"]:
                why = k["error"] if k else "it was not examined"
            elif k["in_purge"]:
                why = "%s is, or shares a file or folder (hard link, bind mount) with, what is purged" % \
                    shown(k["adapter"])
            if why and k is not None and k.get("kind") == "checkpoints":
                ref.append(["no-keeper", "run %s keeps its newest checkpoints (%s), but they cannot be "
                            "kept safely: %s" % (shown(run), k["adapter"], why)])
                break
            if why:
                ref.append(["no-keeper", "run %s loses a checkpoint but has no final adapter that survives "
                            "it (a real folder with non-empty %s and %s): %s; --keep-newest N keeps its "
                            "newest checkpoints instead" % (shown(run), layout.WEIGHTS, layout.CONFIG, why)])
                break
        if p["symlinks"]:
            warnings.append("%s holds %d symlink(s); they are removed, never followed" % (shown(a), p["symlinks"]))
        z = p["zfs"]
        if z and z.get("error"):
            warnings.append("%s is on ZFS but snapshots could not be read (%s)" % (shown(a), shown(z["error"])))
        elif z and (z.get("usedbysnapshots") or z.get("snapshots")):
            warnings.append("%s is on ZFS dataset %s with %s snapshot(s) (usedbysnapshots %d bytes): blocks they "
                            "reference stay allocated until the snapshots are destroyed" % (
                                shown(a), shown(z["dataset"]), z.get("snapshots"), z.get("usedbysnapshots", 0)))
        out.append({"refusals": ref, "checks": _checks(ref)})
    for k in facts["keepers"]:
        for f in k["files"]:
            if f["nlink"] > 1 and not k["in_purge"]:
                warnings.append("kept file %s has %d hard links elsewhere" % (shown(f["path"]), f["nlink"]))
    return {"paths": out, "warnings": warnings}


def _checks(ref, skipped=False):
    failed = {r[0] for r in ref}
    return {c: "fail" if c in failed else ("skipped" if skipped else "pass") for c in CHECKS}


class _Moved(Exception):
    """The entry being removed is not (or no longer holds only) what was checked."""


def _renameat2(src_fd, src, dst_fd, dst, flags):
    """renameat2(2) through libc; None where this libc or kernel has no such call."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError, ImportError):
        return None
    if fn(src_fd, fsenc(src), dst_fd, fsenc(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return None
    raise OSError(err, os.strerror(err), dst)


def _put_back(pfd, private, name):
    """Rename `private` back to `name` without ever replacing something now at `name`; a
    sentence saying where the entry is when it cannot go back."""
    try:
        done = _renameat2(pfd, private, pfd, name, RENAME_NOREPLACE)
        if done is None:
            try:
                os.stat(name, dir_fd=pfd, follow_symlinks=False)
                raise OSError(errno.EEXIST, "something new is at its name")
            except FileNotFoundError:
                os.rename(private, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        return ""
    except OSError as e:
        return "; it could not be put back (%s) and is now named %s in the same folder" % (
            e.strerror, shown(private))


def _empty(fd, where, allowed, keep, removed):
    """Remove everything inside the open folder `fd`, fd-based and never following a link.
    Every entry must be one the check saw (`allowed`, by device and inode) and no keeper;
    `removed` counts what is gone (for the sentence when it stops half way)."""
    with os.scandir(fd) as it:
        names = [e.name for e in it]
    for name in names:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        key = (st.st_dev, st.st_ino)
        if key in keep:
            raise _Moved("%s/%s is a kept adapter file or folder" % (shown(where), shown(name)))
        if allowed is not None and key not in allowed:
            raise _Moved("%s/%s was not there when it was checked" % (shown(where), shown(name)))
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            try:
                sst = os.fstat(sub)
                if (sst.st_dev, sst.st_ino) != key:
                    raise _Moved("%s/%s was replaced while it was removed" % (shown(where), shown(name)))
                _empty(sub, where + "/" + name, allowed, keep, removed)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
        removed[0] += 1


def remove_pinned(comps, pins, allowed=None, keep=frozenset()):
    """Remove the folder at `comps` only if it is the object that was checked; the free bytes
    of its filesystem afterwards.

    The parent is opened by fd along the pinned components; the entry is renamed to a private
    name inside that parent (so its name can no longer be swapped under us), opened with
    O_NOFOLLOW and fstat-ed against the pin, and only then emptied through that fd and removed.
    A pin mismatch renames it back (never over anything new) and raises
    WalkError('changed-since-check'); so does an entry inside that the check did not see.
    """
    if not comps:
        raise WalkError("changed-since-check", "/ cannot be removed")
    parent, pfd, _ = open_chain(comps[:-1], pins=pins[:-1])
    name = comps[-1]
    where = "/" + "/".join(comps)
    private = "%s%d-%s" % (PRIVATE_PREFIX, os.getpid(), os.urandom(8).hex())
    fd = None
    removed = [0]
    try:
        try:
            os.rename(name, private, src_dir_fd=pfd, dst_dir_fd=pfd)
        except FileNotFoundError:
            raise WalkError("changed-since-check", "%s is no longer there" % shown(where)) from None
        try:
            fd = os.open(private, DIR_FLAGS, dir_fd=pfd)
            st = os.fstat(fd)
            if [st.st_dev, st.st_ino] != list(pins[-1]):
                raise _Moved("%s is not the folder that was checked (it was replaced or exchanged)" % shown(where))
            _empty(fd, where, allowed, keep, removed)
            os.close(fd)
            fd = None
            os.rmdir(private, dir_fd=pfd)
        except (_Moved, OSError) as e:
            _close(fd)
            fd = None
            done = " (%d entries inside it were already removed)" % removed[0] if removed[0] else ""
            back = _put_back(pfd, private, name)
            if isinstance(e, _Moved) or e.errno in (errno.ELOOP, errno.ENOTDIR):
                why = str(e) if isinstance(e, _Moved) else \
                    "%s is not the folder that was checked (a link or file is in its place)" % shown(where)
                raise WalkError("changed-since-check", why + done + back) from None
            e.strerror = (e.strerror or str(e)) + done + back
            raise
        return fsinfo.free_bytes(pfd)
    finally:
        _close(fd, parent, pfd)


def execute(req):
    """Check everything again, compare with the plan, remove one path at a time, verify."""
    paths, plan = req["paths"], req["plan"]
    facts, inodes = _gather(paths, req["roots"], hashing=False, keep=req.get("keep"))
    verdict = evaluate(facts)
    changed = [None] * len(paths)
    for n, p in enumerate(facts["paths"]):
        if p["error"] or p["pins"] != plan["pins"][n]:
            changed[n] = "it is not the folder that was checked (a component was replaced or moved)"
    now = {f["path"]: f for k in facts["keepers"] for f in k["files"]}
    sig = ("dev", "ino", "bytes", "mtime_ns")
    for f in plan["keepers"]:
        g = now.get(f["path"])
        if g is None or [g[x] for x in sig] != [f[x] for x in sig]:
            changed = [c or "kept file %s changed since the check" % shown(f["path"]) for c in changed]
    result = {"facts": facts, "verdict": verdict, "changed": changed, "results": [], "attempted": False}
    if any(changed) or any(v["refusals"] for v in verdict["paths"]):
        return result
    result["attempted"] = True
    keep = {(f["dev"], f["ino"]) for f in plan["keepers"]}
    keep.update(tuple(k["dir"]) for k in facts["keepers"] if k.get("dir"))
    keep.update(tuple(d) for k in facts["keepers"] for d in k.get("dirs") or [])
    stop = None
    for n, p in enumerate(facts["paths"]):
        r = {"deleted": False, "error": None, "changed": None, "free_bytes_after": None}
        result["results"].append(r)
        if stop:
            r["error"] = "not attempted: %s" % stop
            continue
        try:
            r["free_bytes_after"] = remove_pinned([c for c in p["abs"].split("/") if c], plan["pins"][n],
                                                  inodes[n], keep)
            r["deleted"] = True
        except WalkError as e:
            r["changed"] = e.detail
            stop = "an earlier path changed since the check"
        except OSError as e:
            r["error"] = "%s: %s" % (shown(e.filename) if isinstance(e.filename, str) else "delete", e.strerror)
            stop = "an earlier path failed"
    result["sha256_after"] = {}
    for f in plan["keepers"]:
        try:
            result["sha256_after"][f["path"]] = sha256_file(f["path"])
        except (OSError, WalkError):
            result["sha256_after"][f["path"]] = None
    return result


def _check(req):
    if isinstance(req.get("keep"), dict) and isinstance(req.get("roots"), list):
        rule = keep_newest(req["keep"].get("run"), req["keep"].get("n"))
        facts = gather(rule["purge"], req["roots"], hashing=True,
                       keep={"run": rule["run"], "kept": rule["kept"]} if rule["run"] else None)
        facts["keep"] = rule
        return facts
    if not isinstance(req.get("paths"), list) or not isinstance(req.get("roots"), list):
        raise Refused("bad-request", "a check needs a list of paths and a list of roots")
    return gather(req["paths"], req["roots"], hashing=True)


def _execute(req):
    if not isinstance(req.get("plan"), dict) or len(req["plan"].get("pins") or []) != len(req.get("paths") or []):
        raise Refused("bad-request", "an execute request needs the plan's pins for every path")
    keep = req.get("keep")
    if keep is not None and not (isinstance(keep, dict) and isinstance(keep.get("run"), str)
                                 and isinstance(keep.get("kept"), list) and keep["kept"]):
        raise Refused("bad-request", "a keep rule needs its run and the checkpoints it keeps")
    return execute(req)


OPS = {"check": _check, "execute": _execute}

if __name__ == "__main__":
    sys.exit(serve(OPS))
