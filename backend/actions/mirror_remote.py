"""The mirror helper that runs ON a host: stdlib only, Python 3.8 or newer.

Its source travels over SSH and its input is JSON on stdin, so no path is ever pasted into a
shell string. The first line of stdin names the operation:

- `list`: every file under a folder (size, mtime_ns, inode, mode), optionally hashed, files in
  parallel threads (hashlib releases the GIL), plus the symlinks and special files found.
- `read`: stream files as frames (4-byte big-endian length, data; length 0 ends a file, then
  one JSON line: the sha256 of the bytes read from this disk), then re-check each file's
  (size, mtime_ns, inode) on request.
- `write`: receive those frames into a hidden partial folder beside the destination, fsync each
  file, hash it again from this disk, and rename into place only when told to commit. Any
  error, an abort, or stdin closing (the controller or its connection died) removes the
  partial folder; a partial left by a killed writer is removed by the next writer.

Paths travel as str decoded from the file system's bytes with utf-8/surrogateescape, so any
name (non-UTF-8 bytes included) goes back to the same bytes.
"""

import errno
import hashlib
import json
import os
import queue
import random
import shutil
import signal
import stat
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

CHUNK = 1 << 20
HDR = struct.Struct(">I")
PARTIAL = b".fleetdeck-partial-"
MARKER = b"fleetdeck-helper"  # in the argv of every helper started by fleetdeck (ssh.BOOT)
RDFLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


class Refused(Exception):
    """An expected failure: a reason code and a sentence for the operator."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


def fsdec(b):
    return b.decode("utf-8", "surrogateescape")


def fsenc(s):
    return s.encode("utf-8", "surrogateescape")


def host_path(p):
    """`~` expands on this host; a relative path is relative to where the session starts."""
    b = os.path.expanduser(fsenc(p))
    if not b.startswith(b"/"):
        b = os.path.join(os.getcwdb(), b)
    while len(b) > 1 and b.endswith(b"/"):
        b = b[:-1]
    return b


def kind_of(st):
    if st is None:
        return None
    m = st.st_mode
    if stat.S_ISLNK(m):
        return "symlink"
    if stat.S_ISDIR(m):
        return "dir"
    if stat.S_ISREG(m):
        return "file"
    return "other"


def lstat_or_none(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def open_rel(root, rel, follow):
    """Open root/rel for reading; without `follow`, a symlink at any component is refused."""
    if follow:
        return os.open(os.path.join(root, rel), RDFLAGS)
    parts = rel.split(b"/")
    fd = os.open(root, RDFLAGS | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, RDFLAGS | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], RDFLAGS | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def walk(root, follow, skip_partials):
    """Everything under root, as relative bytes paths, sorted by kind."""
    out = {"files": [], "dirs": [], "symlinks": [], "special": [], "errors": [], "partials": []}
    seen = set()
    stack = [b""]
    while stack:
        rel = stack.pop()
        full = os.path.join(root, rel) if rel else root
        try:
            with os.scandir(full) as it:
                entries = list(it)
        except OSError as e:
            out["errors"].append([fsdec(rel), e.strerror or str(e)])
            continue
        for ent in entries:
            r = os.path.join(rel, ent.name) if rel else ent.name
            if skip_partials and not rel and ent.name.startswith(PARTIAL):
                out["partials"].append(fsdec(r))
                continue
            try:
                st = os.lstat(ent.path)
                if stat.S_ISLNK(st.st_mode):
                    if not follow:
                        out["symlinks"].append(fsdec(r))
                        continue
                    st = os.stat(ent.path)
            except OSError as e:
                out["errors"].append([fsdec(r), e.strerror or str(e)])
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if follow and key in seen:
                    out["errors"].append([fsdec(r), "directory loop through a symlink"])
                    continue
                seen.add(key)
                out["dirs"].append([fsdec(r), stat.S_IMODE(st.st_mode)])
                stack.append(r)
            elif stat.S_ISREG(st.st_mode):
                out["files"].append({"path": fsdec(r), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
                                     "ino": st.st_ino, "mode": stat.S_IMODE(st.st_mode)})
            else:
                out["special"].append(fsdec(r))
    out["files"].sort(key=lambda f: f["path"])
    out["dirs"].sort()
    return out


def hash_fd(fd, buf):
    """sha256 and length of what is left to read from fd."""
    h = hashlib.sha256()
    n = 0
    view = memoryview(buf)
    while True:
        k = os.readv(fd, [buf])
        if not k:
            return h.hexdigest(), n
        h.update(view[:k])
        n += k


def hash_rel(root, rel, follow):
    """sha256 of root/rel read from this disk, or an error sentence."""
    try:
        fd = open_rel(root, fsenc(rel), follow)
    except OSError as e:
        return {"sha256": None, "error": e.strerror or str(e)}
    try:
        st = os.fstat(fd)
        digest, n = hash_fd(fd, bytearray(CHUNK))
        if n != st.st_size:
            return {"sha256": None, "error": "changed while it was hashed"}
        return {"sha256": digest, "bytes": n}
    except OSError as e:
        return {"sha256": None, "error": e.strerror or str(e)}
    finally:
        os.close(fd)


def free_bytes(path):
    """Bytes an unprivileged writer may still use on the file system holding `path` (or the
    nearest folder above it that exists); None when it cannot be told."""
    while True:
        try:
            st = os.statvfs(path)
            return st.f_bavail * st.f_frsize
        except (FileNotFoundError, NotADirectoryError):
            if path in (b"/", b""):
                return None
            path = os.path.dirname(path)
        except OSError:
            return None


def op_list(req):
    """Describe (and with `hash`, hash) the folder at req["path"] on this host."""
    root = host_path(req["path"])
    st = lstat_or_none(root)
    kind = kind_of(st)
    follow = bool(req.get("follow"))
    if kind == "symlink" and follow:
        try:
            kind = kind_of(os.stat(root))
        except OSError:
            kind = "dangling"
    res = {"path": fsdec(root), "kind": kind, "dev": st.st_dev if st else None,
           "mode": stat.S_IMODE(st.st_mode) if st else None}
    parent = os.path.dirname(root)
    res["free_bytes"] = free_bytes(root)
    pst = lstat_or_none(parent)
    res["parent_dev"] = pst.st_dev if pst else None
    if kind != "dir":
        return res
    res.update(walk(root, follow, bool(req.get("skip_partials"))))
    if req.get("hash") and res["files"]:
        threads = max(1, min(int(req.get("threads") or 8), len(res["files"])))
        with ThreadPoolExecutor(threads) as pool:
            hashed = pool.map(lambda f: hash_rel(root, f["path"], follow), res["files"])
            for f, h in zip(res["files"], hashed):  # noqa: B905 (strict= is 3.10+; hosts run 3.8)
                f.update(h)
    return res


# -- read: the source end of a copy -------------------------------------------------------------
def op_read(req, inp, out):
    """Stream req["files"] as frames with a sha256 trailer each; then re-check them on request."""
    root = host_path(req["path"])
    follow = bool(req.get("follow"))
    files = req["files"]
    q = queue.Queue(maxsize=8)

    def produce():
        # reading and hashing here overlaps with writing to the channel in the main thread
        for f in files:
            try:
                fd = open_rel(root, fsenc(f["path"]), follow)
            except OSError as e:
                q.put((None, {"error": e.strerror or str(e), "code": "source-changed"}))
                return
            try:
                st = os.fstat(fd)
                if (st.st_size, st.st_mtime_ns, st.st_ino) != (f["bytes"], f["mtime_ns"], f["ino"]):
                    q.put((None, {"error": "changed since it was listed", "code": "source-changed"}))
                    return
                h = hashlib.sha256()
                n = 0
                while True:
                    chunk = os.read(fd, CHUNK)
                    if not chunk:
                        break
                    h.update(chunk)
                    n += len(chunk)
                    q.put((chunk, None))
                q.put((None, {"sha256": h.hexdigest(), "bytes": n}))
            except OSError as e:
                q.put((None, {"error": e.strerror or str(e), "code": "read-failed"}))
                return
            finally:
                os.close(fd)

    threading.Thread(target=produce, daemon=True).start()
    for _ in files:
        while True:
            chunk, trailer = q.get()
            if chunk is None:
                break
            out.write(HDR.pack(len(chunk)))
            out.write(chunk)
        out.write(HDR.pack(0))
        out.write(json.dumps(trailer).encode() + b"\n")
        out.flush()
        if trailer.get("error"):
            return
    cmd = json.loads(inp.readline() or b"{}")
    if cmd.get("op") != "recheck":
        return
    changed = []
    for f in files:
        try:
            fd = open_rel(root, fsenc(f["path"]), follow)
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
        except OSError as e:
            changed.append([f["path"], e.strerror or str(e)])
            continue
        if (st.st_size, st.st_mtime_ns, st.st_ino) != (f["bytes"], f["mtime_ns"], f["ino"]):
            changed.append([f["path"], "size, mtime or inode changed during the copy"])
    out.write(json.dumps({"changed": changed}).encode() + b"\n")
    out.flush()


# -- write: the destination end of a copy -------------------------------------------------------
def pid_alive_helper(pid):
    """True if `pid` runs and is a fleetdeck helper (so its partial folder is still in use)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return MARKER in f.read()
    except OSError:
        return True  # no /proc: a live pid might be ours, keep its folder


def clean_stale(folder, prefix):
    """Remove partial folders whose writer is gone; the names removed."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        try:
            pid = int(name[len(prefix):].split(b"-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or pid_alive_helper(pid):
            continue
        path = os.path.join(folder, name)
        if kind_of(lstat_or_none(path)) == "dir":
            remove_tree(path)
            removed.append(fsdec(path))
    return removed


def read_exact(inp, n):
    """Exactly n bytes, or EOFError: the controller went away mid-frame."""
    data = inp.read(n)
    if data is None or len(data) != n:
        raise EOFError("input ended")
    return data


def write_all(fd, data):
    view = memoryview(data)
    while view:
        k = os.write(fd, view)
        view = view[k:]


class Writer:
    """The partial folder for one destination, and how to fill, commit or remove it."""

    def __init__(self, req):
        self.dst = host_path(req["path"])
        self.name = os.path.basename(self.dst)
        if self.name in (b"", b".", b".."):
            raise Refused("bad-path", "the destination must name a folder")
        self.parent = os.path.dirname(self.dst)
        self.partial = None
        self.inside = False
        self.root_mode = req.get("mode")

    def prepare(self):
        st = lstat_or_none(self.dst)
        kind = kind_of(st)
        if kind == "symlink":
            raise Refused("dst-symlink", "the destination is a symlink")
        if kind not in (None, "dir"):
            raise Refused("dst-not-a-directory", "the destination exists and is not a folder")
        try:
            os.makedirs(self.parent, exist_ok=True)
        except OSError as e:
            raise Refused("dst-unwritable", f"cannot create {fsdec(self.parent)}: {e.strerror}") from None
        prefix = b"." + self.name + PARTIAL
        stale = clean_stale(self.parent, prefix)
        tag = b"%d-%08x" % (os.getpid(), random.getrandbits(32))
        if kind == "dir":
            stale += clean_stale(self.dst, PARTIAL)
            if [n for n in os.listdir(self.dst) if not n.startswith(PARTIAL)]:
                raise Refused("dst-not-empty", "the destination is no longer empty")
            # a mount point cannot be renamed over: fill a partial folder inside it instead
            self.inside = st.st_dev != os.lstat(self.parent).st_dev
        if self.inside:
            self.partial = os.path.join(self.dst, PARTIAL + tag)
        else:
            base = prefix[:255 - len(tag)] + tag if len(prefix) + len(tag) > 255 else prefix + tag
            self.partial = os.path.join(self.parent, base)
        os.mkdir(self.partial, 0o700)
        return stale

    def receive(self, inp, files, dirs, pool):
        for rel, _mode in sorted(dirs, key=lambda d: d[0].count("/")):
            os.mkdir(os.path.join(self.partial, fsenc(rel)), 0o700)
        futures = []
        for f in files:
            path = os.path.join(self.partial, fsenc(f["path"]))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                while True:
                    (n,) = HDR.unpack(read_exact(inp, 4))
                    if n == 0:
                        break
                    write_all(fd, read_exact(inp, n))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.utime(path, ns=(f["mtime_ns"], f["mtime_ns"]), follow_symlinks=False)
            # hashed again from this disk while the next file arrives
            futures.append(pool.submit(hash_rel, self.partial, f["path"], False))
        hashed = [fut.result() for fut in futures]
        # the source's modes only now: a read-only file or folder must not stop the hashing
        for f in files:
            os.chmod(os.path.join(self.partial, fsenc(f["path"])), f["mode"])
        for rel, mode in dirs:
            os.chmod(os.path.join(self.partial, fsenc(rel)), mode)
        fsync_tree(self.partial)
        return hashed

    def commit(self):
        if self.inside:
            names = os.listdir(self.partial)
            for n in names:
                if os.path.lexists(os.path.join(self.dst, n)):
                    raise Refused("dst-changed", f"{fsdec(n)} appeared in the destination")
            for n in names:
                os.rename(os.path.join(self.partial, n), os.path.join(self.dst, n))
            os.rmdir(self.partial)
            fsync_dir(self.dst)
        else:
            if self.root_mode is not None:
                os.chmod(self.partial, self.root_mode)
            try:
                # over an absent or empty folder this is one atomic step
                os.rename(self.partial, self.dst)
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise Refused("dst-changed", "the destination changed during the copy") from None
                raise
            fsync_dir(self.parent)
        self.partial = None

    def remove(self):
        if self.partial is not None:
            remove_tree(self.partial)
            self.partial = None


def remove_tree(top):
    """Remove a partial folder even where the source's read-only modes were already applied."""
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            os.chmod(d, 0o700)
            with os.scandir(d) as it:
                stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    shutil.rmtree(top, ignore_errors=True)


def fsync_dir(path):
    """Make a folder's entries durable (a rename, new files)."""
    try:
        fd = os.open(path, RDFLAGS | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(top):
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        fsync_dir(dirpath)


def op_write(req, inp, out):
    """Receive frames into a partial folder; report hashes; commit or remove as told."""
    def say(obj):
        out.write(json.dumps(obj).encode() + b"\n")
        out.flush()

    w = Writer(req)
    try:
        stale = w.prepare()
        say({"ok": True, "partial": fsdec(w.partial), "dst": fsdec(w.dst), "stale_removed": stale})
        threads = max(1, int(req.get("threads") or 4))
        with ThreadPoolExecutor(threads) as pool:
            hashed = w.receive(inp, req["files"], req.get("dirs", []), pool)
        if json.loads(inp.readline() or b"{}").get("op") != "finish":
            raise EOFError("no finish")
        say({"files": hashed})
        if json.loads(inp.readline() or b"{}").get("op") != "commit":
            w.remove()
            say({"aborted": True})
            return
        w.commit()
        say({"committed": True, "free_bytes": free_bytes(w.dst)})
    except EOFError:
        w.remove()  # the controller went away: nothing may stay behind
    except Refused as e:
        w.remove()
        say({"error": e.message, "code": e.code})
    except OSError as e:
        w.remove()
        code = "disk-full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "write-failed"
        where = f" ({fsdec(os.fsencode(e.filename))})" if e.filename else ""
        say({"error": f"{e.strerror or e}{where}", "code": code})
    finally:
        w.remove()


def _hangup(signum, frame):
    raise EOFError(f"signal {signum}")


def main():
    """Read the request line and run the operation it names."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, _hangup)
    inp = sys.stdin.buffer
    out = sys.stdout.buffer
    req = json.loads(inp.readline())
    op = req.get("op")
    try:
        if op == "list":
            out.write(json.dumps(op_list(req)).encode())
        elif op == "read":
            op_read(req, inp, out)
        elif op == "write":
            op_write(req, inp, out)
        else:
            out.write(json.dumps({"error": f"unknown op {op!r}", "code": "helper"}).encode())
        out.flush()
    except (EOFError, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
