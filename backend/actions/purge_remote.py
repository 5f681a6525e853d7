"""The purge helper: runs on the purged host (stdlib only, Python 3.8+), fed JSON on stdin.

`{"mode": "check", "paths": [...], "roots": [...]}` gathers the facts a purge is judged on;
`{"mode": "execute", ..., "plan": {...}}` gathers them again, refuses everything if any path
fails a check or moved since the plan (pins of every component, keeper files), and otherwise
deletes fd-based, one path at a time, then hashes the keepers again. The controller imports
this module for `evaluate`, so both sides judge with the same code.
"""
# It runs on the host's Python 3.8 or newer: %-formatting, PIPE pairs and the 3.11 check stay.
# ruff: noqa: UP022, UP031, UP036

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
WALK_CODES = ("not-absolute", "not-normalized", "not-found", "symlink", "not-directory", "unreadable")
CHECKS = WALK_CODES + ("overlapping", "outside-roots", "is-root", "holds-final-adapter", "in-use", "container-mount",
                       "container-unknown", "mounted", "no-keeper")
GONE = (errno.ENOENT, errno.ESRCH)
CHECKPOINT = re.compile(r"checkpoint-[0-9]+$")


class WalkError(Exception):
    """A path that cannot be walked safely: `code` is a refusal code."""

    def __init__(self, code, detail):
        Exception.__init__(self, detail)
        self.code = code
        self.detail = detail


def shown(p):
    """A path escaped so newlines and control characters cannot disguise it (repr-like)."""
    out = []
    for ch in p:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


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
    got = []
    try:
        st = os.fstat(fd)
        got.append([st.st_dev, st.st_ino])
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
            if pins is not None and (len(pins) < len(got) or pins[len(got) - 1] != got[-1]):
                raise WalkError("changed-since-check", "component %s is not the folder checked" % shown(name))
    except BaseException:
        os.close(fd)
        if parent is not None:
            os.close(parent)
        raise
    return parent, fd, got


def _close(*fds):
    for fd in fds:
        if fd is not None:
            os.close(fd)


def sha256_at(dir_fd, name):
    """sha256 of a regular file opened without following a link."""
    h = hashlib.sha256()
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
    finally:
        os.close(fd)
    return h.hexdigest()


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


def unescape_mount(b):
    """A mountinfo field with its octal escapes (\\040 ...) decoded."""
    return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), b))


def read_mounts():
    """[(mount point, fstype, source)] from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            left, _, right = line.rstrip(b"\n").partition(b" - ")
            lf, rf = left.split(b" "), right.split(b" ")
            if len(lf) >= 5 and len(rf) >= 2:
                out.append((unescape_mount(lf[4]), os.fsdecode(rf[0]), unescape_mount(rf[1])))
    return out


def under(p, top):
    """True when p is top or lies below it (string comparison of clean absolute paths)."""
    return p == top or p.startswith(top.rstrip("/") + "/")


def _run(argv, timeout=30):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 255, b"", str(e).encode()
    return r.returncode, r.stdout, r.stderr


def docker_facts():
    """Every container's mounts, or why the engine could not be asked."""
    exe = shutil.which("docker")
    if not exe:
        return {"present": False, "state": "absent", "mounts": []}
    rc, out, err = _run([exe, "ps", "-a", "-q", "--no-trunc"])
    if rc == 0:
        ids = out.decode().split()
        if not ids:
            return {"present": True, "state": "ok", "containers": 0, "mounts": []}
        rc, out, err = _run([exe, "inspect"] + ids)
        if rc == 0:
            mounts = []
            try:
                for c in json.loads(out.decode("utf-8", "surrogateescape")):
                    for m in c.get("Mounts") or []:
                        mounts.append({"id": c.get("Id", "")[:12], "name": c.get("Name", "").lstrip("/"),
                                       "source": m.get("Source") or "", "destination": m.get("Destination"),
                                       "running": bool((c.get("State") or {}).get("Running"))})
            except (ValueError, AttributeError, TypeError) as e:
                return {"present": True, "state": "error", "error": "docker inspect: %s" % e, "mounts": []}
            return {"present": True, "state": "ok", "containers": len(ids), "mounts": mounts}
    text = err.decode("utf-8", "replace").strip()
    # judged on the line about the daemon: a config-file warning may say "permission denied" too
    daemon = next((ln for ln in reversed(text.splitlines()) if "docker daemon" in ln.lower()), "").lower()
    # a daemon that is not running runs no container; one we may not ask might run many
    state = "denied" if "permission denied" in daemon else (
        "down" if "cannot connect to the docker daemon" in daemon else "error")
    return {"present": True, "state": state, "error": text.splitlines()[-1] if text else "exit %d" % rc,
            "mounts": []}


def zfs_facts(dataset):
    """Snapshot usage of a ZFS dataset: usedbysnapshots and how many snapshots it has."""
    exe = shutil.which("zfs") or next((p for p in ("/sbin/zfs", "/usr/sbin/zfs") if os.path.exists(p)), None)
    if not exe:
        return {"dataset": dataset, "error": "no zfs command"}
    rc, out, err = _run([exe, "get", "-Hp", "-o", "value", "usedbysnapshots", dataset])
    if rc != 0:
        return {"dataset": dataset, "error": err.decode("utf-8", "replace").strip()}
    rc2, out2, _ = _run([exe, "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", dataset])
    return {"dataset": dataset, "usedbysnapshots": int(out.split()[0]) if out.split() else 0,
            "snapshots": len(out2.split()) if rc2 == 0 else None}


def scan_proc(index, tops):
    """Processes using anything in `index` ((dev, ino) -> path number): open fds, mappings
    (device and inode; a name under a purged path also counts), cwd and root."""
    me = os.getpid()
    holders, unreadable = [], []
    ancestors = _ancestors()

    def hold(key, name, pid, how, what):
        i = index.get(key)
        if i is None and name is not None:
            i = next((n for n, t in enumerate(tops) if t and under(name, t)), None)
        if i is not None:
            holders.append({"index": i, "pid": pid, "how": how, "file": what, "comm": comm(pid)})

    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid, base = int(entry), "/proc/" + entry
        if _kernel_thread(base):
            continue
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
            with open(base + "/maps", "rb") as f:
                for line in f:
                    parts = line.rstrip(b"\n").split(None, 5)
                    if len(parts) < 5 or parts[4] == b"0":
                        continue
                    major, minor = parts[3].split(b":")
                    name = os.fsdecode(parts[5].strip()) if len(parts) > 5 else None
                    if name and name.endswith(" (deleted)"):
                        name = name[:-10]
                    key = (os.makedev(int(major, 16), int(minor, 16)), int(parts[4]))
                    hold(key, name, pid, "maps", name)
        except OSError as e:
            if e.errno in GONE:
                continue
            unreadable.append({"pid": pid, "comm": comm(pid), "ancestor": pid in ancestors,
                               "error": "%s: %s" % (e.filename or base, e.strerror)})
    seen, uniq = set(), []
    for h in holders:
        k = (h["index"], h["pid"], h["how"], h["file"])
        if k not in seen:
            seen.add(k)
            uniq.append(h)
    return uniq, unreadable


def _kernel_thread(base):
    """Kernel threads hold no user files in /proc/PID/fd or maps; unprivileged users cannot
    read their entries, which would otherwise block every purge as unknown."""
    try:
        with open(base + "/stat", "rb") as f:
            data = f.read()
        return bool(int(data[data.rindex(b")") + 2:].split()[6]) & 0x00200000)  # PF_KTHREAD
    except (OSError, ValueError, IndexError):
        return False


def _ancestors():
    """Pids of the processes this helper descends from (init, the session, the controller)."""
    out, pid = set(), os.getppid()
    while pid > 0 and pid not in out:
        out.add(pid)
        try:
            with open("/proc/%d/status" % pid, "rb") as f:
                pid = next((int(line.split()[1]) for line in f if line.startswith(b"PPid:")), 0)
        except (OSError, ValueError, IndexError):
            break
    return out


def _readlink(p):
    try:
        return os.readlink(p)
    except OSError:
        return None


def comm(pid):
    """The process's short name, or '?'."""
    try:
        with open("/proc/%d/comm" % pid, "rb") as f:
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def runs_losing_checkpoints(comps, ckpt_dirs):
    """Runs that lose a checkpoint: the folder holding `checkpoints/`, else the parent of a
    `checkpoint-*` folder; from the path's own components, then from folders inside it."""
    runs = []
    for i, c in enumerate(comps):
        if c == "checkpoints" or c.startswith("checkpoint-"):
            j = i - 1 if (c != "checkpoints" and i > 0 and comps[i - 1] == "checkpoints") else i
            runs.append("/" + "/".join(comps[:j]))
            break
    for d in ckpt_dirs:
        parent, name = d.rsplit("/", 1)
        if name.startswith("checkpoint-") and parent.endswith("/checkpoints"):
            continue
        runs.append(parent)
    return sorted(set(runs))


def keeper_facts(run, index, hashing):
    """The run's final adapter/: walked without following links, every file's identity and
    (when `hashing`) sha256, and whether any of it is an inode of what is purged."""
    adapter = run.rstrip("/") + "/adapter"
    k = {"run": run, "adapter": adapter, "error": None, "files": [], "in_purge": False}
    try:
        parent, fd, pins = open_chain([c for c in adapter.split("/") if c])
    except WalkError as e:
        k["error"] = "%s: %s" % (e.code, e.detail)
        return k
    try:
        k["in_purge"] = any(tuple(p) in index for p in pins)

        def visit(path, name, st):
            key = (st.st_dev, st.st_ino)
            if key in index:
                k["in_purge"] = True
            if stat.S_ISLNK(st.st_mode):
                k["error"] = "symlink: %s inside it is a symlink" % shown(path)
            elif stat.S_ISREG(st.st_mode):
                k["files"].append({"path": path, "bytes": st.st_size, "dev": st.st_dev, "ino": st.st_ino,
                                   "nlink": st.st_nlink, "mtime_ns": st.st_mtime_ns, "sha256": None})

        scan(fd, adapter, visit)
        if hashing:
            for f in k["files"]:
                f["sha256"] = sha256_file(f["path"])
        if not k["files"] and not k["error"]:
            k["error"] = "empty: it holds no file"
    except (OSError, WalkError) as e:
        k["error"] = "unreadable: %s" % e
    finally:
        _close(parent, fd)
    return k


def sha256_file(path):
    """sha256 of the file at an absolute path walked with O_NOFOLLOW."""
    comps = [c for c in path.split("/") if c]
    parent, fd, _ = open_chain(comps[:-1])
    try:
        return sha256_at(fd, comps[-1])
    finally:
        _close(parent, fd)


def free_bytes(fd):
    """Bytes available to an unprivileged writer on the filesystem of an open folder."""
    v = os.statvfs(fd)
    return v.f_bavail * v.f_frsize


def gather(paths, roots, hashing=True):
    """Every fact the purge of these paths is judged on (see `evaluate`)."""
    facts = {"paths": [], "roots": [], "keepers": [], "holders": [], "proc_unreadable": []}
    for r in roots:
        facts["roots"].append({"given": r, "resolved": os.path.realpath(os.path.expanduser(r))})
    index, seen_links = {}, {}
    mounts = read_mounts()
    for n, given in enumerate(paths):
        pf = {"path": given, "abs": None, "error": None, "pins": [], "bytes": 0, "disk_bytes": 0,
              "files": 0, "symlinks": 0, "adapters": [], "runs": [], "mounts_inside": [],
              "containers": [], "free_bytes": None, "fstype": None, "zfs": None, "scan_error": None}
        facts["paths"].append(pf)
        try:
            pf["abs"], comps = split_path(given)
            parent, fd, pf["pins"] = open_chain(comps)
        except WalkError as e:
            pf["error"] = [e.code, e.detail]
            continue
        ckpts = []
        try:
            st = os.fstat(fd)
            index.setdefault((st.st_dev, st.st_ino), n)
            pf["disk_bytes"] += st.st_blocks * 512
            pf["free_bytes"] = free_bytes(fd)

            def visit(path, name, st, pf=pf, n=n, ckpts=ckpts):
                key = (st.st_dev, st.st_ino)
                index.setdefault(key, n)
                seen_links[key] = seen_links.get(key, 0) + 1
                if stat.S_ISLNK(st.st_mode):
                    pf["symlinks"] += 1
                elif stat.S_ISREG(st.st_mode):
                    pf["files"] += 1
                    pf["bytes"] += st.st_size
                    # blocks come back only when every link to the inode goes
                    if seen_links[key] == st.st_nlink:
                        pf["disk_bytes"] += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    pf["disk_bytes"] += st.st_blocks * 512
                    if name == "adapter":
                        pf["adapters"].append(path)
                    if name == "checkpoints" or name.startswith("checkpoint-"):
                        ckpts.append(path)

            scan(fd, pf["abs"].rstrip("/"), visit)
        except OSError as e:
            pf["scan_error"] = "%s: %s" % (shown(e.filename) if isinstance(e.filename, str) else "a file",
                                           e.strerror)
        finally:
            _close(parent, fd)
        pf["runs"] = runs_losing_checkpoints(comps, ckpts)
        pf["mounts_inside"] = [m for m, _, _ in mounts if under(m, pf["abs"])]
        best = max((m for m in mounts if under(pf["abs"], m[0])), key=lambda m: len(m[0]), default=None)
        if best is not None:
            pf["fstype"] = best[1]
            if best[1] == "zfs":
                pf["zfs"] = zfs_facts(best[2])
    tops = [p["abs"] if not p["error"] else None for p in facts["paths"]]
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
            if top and (under(src, top) or under(top, src) or hit == n):
                facts["paths"][n]["containers"].append(m)
    runs = sorted({r for p in facts["paths"] for r in p["runs"]})
    facts["keepers"] = [keeper_facts(r, index, hashing) for r in runs]
    return facts


def _final_adapter(abs_path, roots):
    """True when abs_path is or lies in a run's final adapter/: an `adapter` component below
    the purge root with no `checkpoint*` component before it."""
    top = next((r for r in roots if under(abs_path, r)), "/")
    rel = [c for c in abs_path[len(top.rstrip("/")):].split("/") if c]
    for c in rel:
        if c == "checkpoints" or CHECKPOINT.match(c):
            return False
        if c == "adapter":
            return True
    return False


def evaluate(facts):
    """Judge gathered facts (pure): per path, the refusals [[code, sentence]] and checks
    {code: pass|fail|skipped}; plus warnings for the whole purge."""
    roots = [r["resolved"] for r in facts["roots"]]
    warnings, out = [], []
    keepers = {k["run"]: k for k in facts["keepers"]}
    docker = facts.get("docker") or {"state": "absent"}
    if docker["state"] == "down":
        warnings.append("docker is installed but its engine is not running (%s): no container runs "
                        "now, stopped containers could not be inspected" % docker.get("error"))
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
                      (q["abs"] == a and m < n or under(a, q["abs"]) and q["abs"] != a)), None)
        if other:
            ref.append(["overlapping", "it is the same as, or lies inside, %s, also listed; list each folder "
                        "once" % shown(other)])
        if p["scan_error"]:
            ref.append(["unreadable", "part of it cannot be read (%s), so it cannot be checked" % p["scan_error"]])
        if a in roots:
            ref.append(["is-root", "it is the purge root itself; only folders inside a root can be purged"])
        elif not any(under(a, r) for r in roots):
            ref.append(["outside-roots", "it is outside every purge root (%s)" % ", ".join(
                "%s -> %s" % (shown(r["given"]), shown(r["resolved"])) for r in facts["roots"]) or "none set"])
        adapters = [x for x in [a] + p["adapters"] if _final_adapter(x, roots)]
        if adapters:
            ref.append(["holds-final-adapter", "it is or holds a run's final adapter (%s)" % shown(adapters[0])])
        held = [h for h in facts["holders"] if h["index"] == n]
        if held:
            ref.append(["in-use", "in use: " + "; ".join("pid %d (%s) %s %s" % (
                h["pid"], shown(h["comm"]), {"fd": "has open", "maps": "maps", "cwd": "has its cwd in",
                                             "root": "has its root in"}[h["how"]], shown(h["file"] or "?"))
                for h in held[:3]) + (" and %d more" % (len(held) - 3) if len(held) > 3 else "")])
        elif [u for u in facts["proc_unreadable"] if not u["ancestor"]]:
            u = [u for u in facts["proc_unreadable"] if not u["ancestor"]]
            ref.append(["in-use", "cannot tell whether it is in use: %d process(es) cannot be read (%s); run "
                        "as a user who can read every /proc entry" % (len(u), shown(u[0]["error"]))])
        if p["containers"]:
            c = p["containers"][0]
            ref.append(["container-mount", "container %s (%s) mounts %s at %s" % (
                c["name"] or c["id"], "running" if c["running"] else "stopped", shown(c["source"]),
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
                why = k["error"] if k else "not examined"
            elif k["in_purge"]:
                why = "it is, or shares a file or folder (hard link, bind mount) with, what is purged"
            if why:
                ref.append(["no-keeper", "run %s loses a checkpoint but has no independent final adapter "
                            "(%s: %s)" % (shown(run), shown(run.rstrip("/") + "/adapter"), why)])
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


def rmtree_at(parent_fd, name):
    """Delete the folder `name` inside the open parent literally: links inside are unlinked,
    never followed (shutil's fd-based rmtree where it takes dir_fd, Python 3.11+)."""
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=parent_fd)
    else:
        rmtree_fd(parent_fd, name)


def rmtree_fd(parent_fd, name):
    """The same, for Python < 3.11: every folder opened with O_NOFOLLOW relative to its parent,
    and checked to be the entry that was listed before it is emptied."""
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise OSError(errno.ESTALE, "%s changed while deleted" % shown(name))
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in entries:
            if is_dir:
                rmtree_fd(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def execute(payload):
    """Check everything again, compare with the plan, delete one path at a time, verify."""
    paths, plan = payload["paths"], payload["plan"]
    facts = gather(paths, payload["roots"], hashing=False)
    verdict = evaluate(facts)
    changed = [None] * len(paths)
    for n, p in enumerate(facts["paths"]):
        if p["error"] or p["pins"] != plan["pins"][n]:
            changed[n] = "it is not the folder that was checked (a component was replaced or moved)"
    now = {f["path"]: f for k in facts["keepers"] for f in k["files"]}
    for f in plan["keepers"]:
        g = now.get(f["path"])
        if g is None or [g[x] for x in ("dev", "ino", "bytes", "mtime_ns")] != \
                [f[x] for x in ("dev", "ino", "bytes", "mtime_ns")]:
            changed = [c or "kept file %s changed since the check" % shown(f["path"]) for c in changed]
    result = {"facts": facts, "verdict": verdict, "changed": changed, "results": [], "attempted": False}
    if any(changed) or any(v["refusals"] for v in verdict["paths"]):
        return result
    result["attempted"] = True
    stop = None
    for n, p in enumerate(facts["paths"]):
        r = {"deleted": False, "error": None, "changed": None, "free_bytes_after": None}
        result["results"].append(r)
        if stop:
            r["error"] = "not attempted: %s" % stop
            continue
        comps = [c for c in p["abs"].split("/") if c]
        parent = fd = None
        try:
            parent, fd, _ = open_chain(comps, pins=plan["pins"][n])
            os.close(fd)
            fd = None
            rmtree_at(parent, comps[-1])
            r["deleted"] = True
            r["free_bytes_after"] = free_bytes(parent)
        except WalkError as e:
            r["changed"] = e.detail
            stop = "an earlier path changed since the check"
        except OSError as e:
            r["error"] = "%s: %s" % (shown(e.filename) if isinstance(e.filename, str) else "delete", e.strerror)
            stop = "an earlier path failed"
        finally:
            _close(parent, fd)
    result["sha256_after"] = {}
    for f in plan["keepers"]:
        try:
            result["sha256_after"][f["path"]] = sha256_file(f["path"])
        except (OSError, WalkError):
            result["sha256_after"][f["path"]] = None
    return result


def main():
    """Read the request on stdin, answer one JSON document on stdout."""
    payload = json.load(sys.stdin)
    if payload.get("mode") == "execute":
        out = execute(payload)
    else:
        out = gather(payload["paths"], payload["roots"], hashing=True)
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
