"""The host side of a helper payload: the loader that runs it, and the cache that keeps it.

The controller sends this module's source through BOOT (as plain source, `<n>` and the text),
then one header line: `c SHA256` runs the cached payload of that name (or answers
`{"fleetdeck_payload": "missing", "sha256": SHA256}`, reads stdin to its end and exits: the
controller sends it whole), `p SHA256 SIZE ZSIZE KEEP` is followed by the payload, ZSIZE bytes of
zlib holding SIZE bytes that must hash to SHA256, kept in the cache with KEEP 1. The payload is
UTF-8 JSON, `{"format": 1, "main": NAME, "modules": [[NAME, IS_PACKAGE, SOURCE], ...]}`
(`fleetdeck.backend.fleet.link.bundle.payload`); its modules are imported on demand through a
finder placed first on `sys.meta_path`, and `main` runs as `__main__`.

Where the cache lives, and when a folder, a payload or its bytecode in it is trusted: docs/probe.md
("How it reaches a host"). Anything else is a miss, never other code run.
"""
# Runs on the host's Python 3.8 or newer. Nothing here prints except the one miss line.
# ruff: noqa: UP031

from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import sys
import zlib
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: this loader runs before every helper, so imports little
    from types import CodeType, ModuleType
    from typing import Any, BinaryIO, NoReturn

MISSING = "missing"
#: a payload is at most this big once decompressed (the probe's is ~0.5 MiB)
MAX_SIZE = 64 << 20
#: the cache keeps at most this many files (payloads and bytecode); the oldest go first
KEEP_FILES = 64
_CODE_MAGIC = b"FDC1"
# the loader runs as plain source before any module imports: lib/flags' DIR and READ_NOFOLLOW
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Untrusted(Exception):
    """A cache folder or file that must not be used (the message says why)."""


def code_tag() -> str:
    """What a bytecode file is valid for: this interpreter's cache tag and exact version."""
    return "%s-%x" % (sys.implementation.cache_tag or "python", sys.hexversion)


def cache_base() -> str:
    """The folder the cache lives under: $XDG_CACHE_HOME when absolute, else ~/.cache of the
    effective user as the password database has it."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return xdg
    # deferred: pwd, only read without an absolute XDG_CACHE_HOME (this loader runs before every helper)
    import pwd

    return os.path.join(pwd.getpwuid(os.geteuid()).pw_dir, ".cache")


def _check_dir(st: os.stat_result, path: str, own: bool) -> None:
    """A folder on the cache's path: root's or the user's (the user's alone when `own`), and
    writable by no one else (unless sticky, as /tmp, for a folder above the cache)."""
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted("%s is not a folder" % path)
    if st.st_uid != os.geteuid() and (own or st.st_uid != 0):
        raise Untrusted("%s belongs to another user" % path)
    if st.st_mode & 0o022 and (own or not st.st_mode & stat.S_ISVTX):
        raise Untrusted("%s is writable by others" % path)


def _open_dir(parent: int, name: str, path: str) -> int:
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except OSError as e:
        if os.path.islink(path):
            raise Untrusted("%s is a symlink" % path) from None
        raise e


def _open_base(create: bool) -> tuple[int, str]:
    """A descriptor of the cache's base folder, every folder on its real path checked."""
    base = os.path.realpath(cache_base())
    fd = os.open("/", _DIR)
    path = "/"
    try:
        _check_dir(os.fstat(fd), path, False)
        for part in [p for p in base.split("/") if p]:
            path = os.path.join(path, part)
            try:
                nxt = _open_dir(fd, part, path)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = _open_dir(fd, part, path)
            os.close(fd)
            fd = nxt
            _check_dir(os.fstat(fd), path, False)
        return fd, base
    except BaseException:
        os.close(fd)
        raise


def open_cache(create: bool = False) -> int:
    """A descriptor of the payload folder, every folder on the way checked (`Untrusted` or
    OSError when it cannot be used). With `create`, missing folders are made 0700, and a
    `fleetdeck/` or `payload/` that cannot be trusted is moved aside and made anew."""
    fd, path = _open_base(create)
    try:
        for part in ("fleetdeck", "payload"):
            path = os.path.join(path, part)
            for _attempt in range(3):
                try:
                    nxt = _open_dir(fd, part, path)
                    try:
                        _check_dir(os.fstat(nxt), path, True)
                    except BaseException:
                        os.close(nxt)
                        raise
                    break
                except (Untrusted, OSError):
                    if not create:
                        raise
                    _replace(fd, part)
            else:
                raise Untrusted("%s could not be made a trusted folder" % path)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _replace(parent: int, name: str) -> None:
    """Make room for a new folder `name` in `parent`: an untrusted folder or a symlink is moved
    aside, never emptied or followed (its contents are not ours to judge); then mkdir 0700.
    Anything else there (a file) is left alone, and the cache is not used."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise Untrusted("%s is not a folder" % name)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            return  # a sound folder another helper made a moment ago (only this user writes here)
        os.rename(
            name,
            "%s.untrusted-%d-%d" % (name, os.getpid(), st.st_ino),
            src_dir_fd=parent,
            dst_dir_fd=parent,
        )
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass  # another helper made it at the same moment: checked on the next attempt


def _read_own(d: int, name: str, limit: int) -> bytes:
    """The bytes of regular file `name` in folder `d`, if the user owns it and no one else may
    write it; never through a symlink."""
    fd = os.open(name, _FILE, dir_fd=d)
    try:
        st = os.fstat(fd)
        bad = st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size > limit
        if not stat.S_ISREG(st.st_mode) or bad:
            raise Untrusted(name)
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write(d: int, name: str, data: bytes) -> None:
    """Write `name` in folder `d` whole or not at all: a temporary file, then a rename."""
    tmp = ".tmp-%d-%s" % (os.getpid(), name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE, 0o600, dir_fd=d)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=d)
        raise
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)


def compile_all(doc: dict[str, Any]) -> dict[str, CodeType]:
    """{module name: code object} of every module the payload carries."""
    return {
        name: compile(src, "<fleetdeck-helper:%s>" % name, "exec")
        for name, _pkg, src in doc["modules"]
    }


def _code_bytes(sha: str, codes: dict[str, CodeType]) -> bytes:
    body = marshal.dumps(codes)
    return _CODE_MAGIC + bytes.fromhex(sha) + hashlib.sha256(body).digest() + body


def _codes_from(sha: str, data: bytes) -> dict[str, CodeType] | None:
    """The code objects in a bytecode file's bytes, or None when they are not for payload
    `sha` or do not match their own digest."""
    head = len(_CODE_MAGIC)
    if data[:head] != _CODE_MAGIC or data[head : head + 32] != bytes.fromhex(sha):
        return None
    body = data[head + 64 :]
    if hashlib.sha256(body).digest() != data[head + 32 : head + 64]:
        return None
    try:
        codes = marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None
    return codes if isinstance(codes, dict) else None


def lookup(sha: str) -> tuple[dict[str, Any], dict[str, CodeType]] | None:
    """(payload document, {name: code}) of the cached payload `sha`, or None on any miss."""
    try:
        d = open_cache(create=False)
    except (OSError, Untrusted):
        return None
    try:
        try:
            raw = _read_own(d, sha + ".json", MAX_SIZE)
        except (OSError, Untrusted):
            return None
        if hashlib.sha256(raw).hexdigest() != sha:
            return None
        doc = json.loads(raw.decode("utf-8"))
        code_name = "%s.%s.code" % (sha, code_tag())
        try:
            codes = _codes_from(sha, _read_own(d, code_name, 4 * MAX_SIZE))
        except (OSError, Untrusted):
            codes = None
        if codes is None or set(codes) != {m[0] for m in doc["modules"]}:
            # the payload is sound, its bytecode absent or for another Python: made here
            codes = compile_all(doc)
            try:
                _write(d, code_name, _code_bytes(sha, codes))
            except OSError:
                pass
        return doc, codes
    finally:
        os.close(d)


def store(sha: str, raw: bytes, doc: dict[str, Any], codes: dict[str, CodeType]) -> bool:
    """Keep payload `sha` and its bytecode in the cache; False when the cache cannot be
    used (nothing else happens then: the payload runs all the same)."""
    try:
        d = open_cache(create=True)
    except (OSError, Untrusted):
        return False
    try:
        _write(d, sha + ".json", raw)
        _write(d, "%s.%s.code" % (sha, code_tag()), _code_bytes(sha, codes))
        _prune(d, sha)
        return True
    except OSError:
        return False
    finally:
        os.close(d)


def _prune(d: int, keep: str) -> None:
    """Keep the cache bounded: the newest KEEP_FILES files stay (and those of `keep`)."""
    entries = []
    for e in os.scandir(d):
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if e.name.startswith(keep):
            continue
        entries.append((st.st_mtime, e.name))
    entries.sort(reverse=True)
    for _mtime, name in entries[KEEP_FILES:]:
        try:
            os.unlink(name, dir_fd=d)
        except OSError:
            pass


class Finder(MetaPathFinder, Loader):
    """Imports the payload's modules from it, first on `sys.meta_path`: package folders
    (`fleetdeck`, `fleetdeck.backend`...) are empty packages, the rest run from their bytecode
    (compiled on first import when there is none) in modules `Loader.create_module` makes."""

    def __init__(self, doc: dict[str, Any], codes: dict[str, CodeType] | None) -> None:
        self.mods: dict[str, tuple[bool, str]] = {}
        self.parents = set()  # type: set
        for name, pkg, src in doc["modules"]:
            if name == doc["main"]:
                continue
            self.mods[name] = (pkg, src)
            parts = name.split(".")
            self.parents.update(".".join(parts[:i]) for i in range(1, len(parts)))
        self.codes = codes

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        """A spec for a carried module or one of its packages; None for anything else."""
        if name not in self.mods and name not in self.parents:
            return None
        pkg = name in self.parents or self.mods[name][0]
        return ModuleSpec(name, self, origin="<fleetdeck-helper:%s>" % name, is_package=pkg)

    def exec_module(self, module: ModuleType) -> None:
        """Run a carried module's code in it (a bare package has none)."""
        name = module.__spec__.name if module.__spec__ else module.__name__  # made from its spec
        module.__file__ = "<fleetdeck-helper:%s>" % name
        if name not in self.mods:
            return
        code = self.codes.get(name) if self.codes else None
        if code is None:
            code = compile(self.mods[name][1], module.__file__, "exec")
        exec(code, module.__dict__)


def run(doc: dict[str, Any], codes: dict[str, CodeType] | None) -> None:
    """Run the payload: its modules importable, its main module as `__main__`."""
    sys.meta_path.insert(0, Finder(doc, codes))
    main = doc["main"]
    where = "<fleetdeck-helper:%s>" % main
    code = codes.get(main) if codes else None
    if code is None:
        code = compile([m[2] for m in doc["modules"] if m[0] == main][0], where, "exec")
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__, "__file__": where})


def _fail(message: str) -> NoReturn:
    sys.stderr.write("fleetdeck helper loader: %s\n" % message)
    sys.stderr.flush()
    os._exit(2)


def _missing(sha: str, out: BinaryIO, inp: BinaryIO) -> None:
    """Say the payload is missing, then take the controller's input to its end unread."""
    out.write(json.dumps({"fleetdeck_payload": MISSING, "sha256": sha}).encode() + b"\n")
    out.flush()
    while inp.read(65536):
        pass


def main(inp: BinaryIO | None = None, out: BinaryIO | None = None) -> None:
    """Read the header line (and the payload it announces), then run the payload."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    head = inp.readline(256).split()
    if len(head) == 2 and head[0] == b"c":
        sha = head[1].decode("ascii", "replace")
        found = lookup(sha) if _is_sha(sha) else None
        if found is None:
            _missing(sha, out, inp)
            return
        return run(*found)
    if len(head) != 5 or head[0] != b"p" or not head[2].isdigit() or not head[3].isdigit():
        _fail("unknown header %r" % b" ".join(head)[:100])
    sha = head[1].decode("ascii", "replace")
    size, zsize, keep = int(head[2]), int(head[3]), head[4] == b"1"
    if not _is_sha(sha) or size > MAX_SIZE or zsize > MAX_SIZE:
        _fail("bad payload header")
    packed = inp.read(zsize)
    z = zlib.decompressobj()
    raw = z.decompress(packed, size + 1)
    if len(packed) != zsize or len(raw) != size or hashlib.sha256(raw).hexdigest() != sha:
        _fail("the payload arrived damaged (its size or sha256 differs from its header)")
    doc = json.loads(raw.decode("utf-8"))
    codes: dict[str, CodeType] = {}
    if keep:
        codes = compile_all(doc)
        store(sha, raw, doc, codes)
    return run(doc, codes)


def _is_sha(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


if __name__ == "__main__":
    main()
