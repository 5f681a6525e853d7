"""Weights judged by their bytes: whether a safetensors file, a `pytorch_model.bin` or a shard
index is a finished save, from a header read and a few seeks, never by hashing the file.

- **safetensors**: the first 8 bytes are the header's length N (little-endian), 2 <= N <= 100 MB
  (safetensors' own bound) and N <= size - 8; the header is a JSON object whose tensors each
  have a dtype, a shape and `data_offsets` [begin, end] of whole numbers; sorted by begin, the
  tensors tile the data region with no gap or overlap from byte 0, each as long as its shape
  and dtype say, and the last ends exactly where the file ends (size == 8 + N + end). The data
  region holds no hole (`SEEK_HOLE`): a file sized before it was written (`ftruncate`,
  `fallocate`) and left unfinished reads as zeros the writer never wrote. On ZFS, which stores
  an all-zero block as a hole, only a hole that runs to the end of the file counts (an
  all-zero tensor in a finished save is not a torn one there).
- **pytorch_model.bin**: a zip archive (torch.save's format since 1.6) whose central directory
  reads and whose every member lies inside the file; no hole, as above. The end record's
  member count and directory size are bounded before the directory is read, so a crafted one
  cannot make the probe build millions of member records.
- **a shard index** (`*.index.json`): its `weight_map` names plain file names in the same
  folder, none of them the index itself or a config file, each whole by the rules above, and
  every tensor it maps is in its shard's header (for safetensors shards).

Each answer is None (whole) or one sentence: "torn: adapter_model.safetensors ends at 100 of
67,109,000 bytes". A verdict is remembered per file identity (device, inode, size, mtime and
ctime), so a poll that finds nothing changed pays one fstat.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import zipfile
from collections.abc import Callable

from fleetdeck.backend.host.lib import flags, fsinfo, text, zipend

HEADER_LIMIT = 100 * 1000 * 1000  # safetensors' MAX_HEADER_SIZE
INDEX_LIMIT = 1 << 24
ZIP_MEMBERS_LIMIT = 1 << 17  # torch.save writes one member per storage: a few thousand at most
# the central directory's bytes at most: ZIP_MEMBERS_LIMIT entries of some 200 bytes each (46
# bytes, a short name and extra fields)
ZIP_DIRECTORY_LIMIT = ZIP_MEMBERS_LIMIT * 200
CONFIG_NAMES = ("config.json", "adapter_config.json", "generation_config.json")
# bits per element; a dtype not here is judged by its offsets only
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
# filesystems that store an all-zero block as a hole (compression's zero-block detection)
ZERO_BLOCKS_AS_HOLES = ("zfs",)
_CACHE = {}  # type: dict
_CACHE_LIMIT = 8192


def _n(x: int) -> str:
    return format(x, ",")


def _open(dir_fd: int, name: str) -> int:
    return os.open(name, flags.READ_NOWAIT, dir_fd=dir_fd)


def _fstype(fd: int) -> str | None:
    """The filesystem type of an open file, from /proc/self/mountinfo (None when unknown)."""
    try:
        path = os.readlink("/proc/self/fd/%d" % fd)
        return fsinfo.mount_of(path)[1]
    except Exception:  # an unknown filesystem is judged by the strict rule
        return None


def _hole(fd: int, start: int, size: int) -> int | None:
    """The offset of the first hole in [start, size), or None. On ZFS only a hole that runs to
    the end of the file counts."""
    if start >= size:
        return None
    try:
        at = os.lseek(fd, start, os.SEEK_HOLE)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise
    if at >= size:
        return None
    if _fstype(fd) in ZERO_BLOCKS_AS_HOLES:
        try:
            os.lseek(fd, at, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data after this hole: the tail was never written
                return at
            raise
        return None
    return at


def _read_exact(fd: int, n: int, at: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 1 << 20), at + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _tensors(header: object, name: str) -> list | str:
    """[(begin, end, tensor)] of a parsed header, or a sentence saying why it is not one."""
    if not isinstance(header, dict):
        return "%s's header is not a JSON object" % name
    out = []
    for tensor, meta in header.items():
        if tensor == "__metadata__":
            continue
        if not isinstance(meta, dict):
            return "%s's entry %s is not an object" % (name, text.shown(tensor[:80]))
        offs, shape, dtype = meta.get("data_offsets"), meta.get("shape"), meta.get("dtype")
        if not (
            isinstance(offs, list)
            and len(offs) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in offs)
            and 0 <= offs[0] <= offs[1]
        ):
            return "%s's tensor %s has no sane data_offsets" % (name, text.shown(tensor[:80]))
        if (
            not isinstance(shape, list)
            or len(shape) > 64
            or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 63) for x in shape
            )
            or offs[1] >= (1 << 63)
        ):
            return "%s's tensor %s has no sane shape" % (name, text.shown(tensor[:80]))
        bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
        if bits is not None:
            count, room = 1, 8 * (offs[1] - offs[0]) + 8
            for x in shape:
                count *= x
                if count * bits > room:  # already past what its offsets hold: no huge products
                    break
            if (count * bits + 7) // 8 != offs[1] - offs[0]:
                return "%s's tensor %s holds %s bytes where its shape and dtype need %s" % (
                    name,
                    text.shown(tensor[:80]),
                    _n(offs[1] - offs[0]),
                    _n((count * bits + 7) // 8),
                )
        out.append((offs[0], offs[1], tensor))
    out.sort()
    return out


def _safetensors(fd: int, name: str, size: int) -> str | None:
    if size < 8:
        return "torn: %s ends at %s of at least 8 bytes (no header length)" % (name, _n(size))
    head = _read_exact(fd, 8, 0)
    if len(head) < 8:  # it shrank since its size was read (a save rewriting it in place)
        return "torn: %s ends at %s of at least 8 bytes (no header length)" % (name, _n(len(head)))
    n = struct.unpack("<Q", head)[0]
    if n < 2 or n > HEADER_LIMIT:
        return "%s's header length %s is not sane (a torn or foreign file)" % (name, _n(n))
    if 8 + n > size:
        return "torn: %s ends at %s of %s bytes (inside its header)" % (name, _n(size), _n(8 + n))
    raw = _read_exact(fd, n, 8)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return "%s's header is not valid JSON (a torn or foreign file)" % name
    tensors = _tensors(header, name)
    if isinstance(tensors, str):
        return tensors
    end = 0
    for begin, stop, tensor in tensors:
        if begin != end:
            return "%s's tensors leave a %s at byte %s of its data (%s)" % (
                name,
                "gap" if begin > end else "overlap",
                _n(min(begin, end)),
                text.shown(tensor[:80]),
            )
        end = stop
    want = 8 + n + end
    if size < want:
        return "torn: %s ends at %s of %s bytes" % (name, _n(size), _n(want))
    if size > want:
        return "%s holds %s bytes past its last tensor (%s of %s bytes)" % (
            name,
            _n(size - want),
            _n(size),
            _n(want),
        )
    hole = _hole(fd, 8 + n, size)
    if hole is not None:
        return "sparse: %s has a hole at byte %s of %s (a preallocated or unfinished save)" % (
            name,
            _n(hole),
            _n(size),
        )
    return None


def _zip(fd: int, name: str, size: int) -> str | None:
    directory = zipend.members_and_size(fd, size)
    if directory is not None and directory[0] > ZIP_MEMBERS_LIMIT:
        return "%s names %s members, more than %s" % (
            name,
            _n(directory[0]),
            _n(ZIP_MEMBERS_LIMIT),
        )
    if directory is not None and directory[1] > ZIP_DIRECTORY_LIMIT:
        return "%s has a central directory of %s bytes, more than %s" % (
            name,
            _n(directory[1]),
            _n(ZIP_DIRECTORY_LIMIT),
        )
    f = os.fdopen(os.dup(fd), "rb")
    try:
        try:
            zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return (
                "torn: %s is not a whole zip archive (%s bytes; a torn save, or the legacy "
                % (
                    name,
                    _n(size),
                )
                + "torch format)"
            )
        infos = zf.infolist()
        if not infos:
            return "%s is an empty archive" % name
        if len(infos) > ZIP_MEMBERS_LIMIT:
            return "%s names %s members, more than %s" % (
                name,
                _n(len(infos)),
                _n(ZIP_MEMBERS_LIMIT),
            )
        for info in infos:
            # the local header is 30 bytes plus its name and extra field
            if info.header_offset + 30 + len(info.filename) + info.compress_size > size:
                return "torn: %s's member %s lies past its end (%s bytes)" % (
                    name,
                    text.shown(info.filename[:80]),
                    _n(size),
                )
    finally:
        f.close()
    hole = _hole(fd, 0, size)
    if hole is not None:
        return "sparse: %s has a hole at byte %s of %s (a preallocated or unfinished save)" % (
            name,
            _n(hole),
            _n(size),
        )
    return None


def _judge(dir_fd: int, name: str, check: Callable[[int, str, int], str | None]) -> str | None:
    try:
        fd = _open(dir_fd, name)
    except (ValueError, UnicodeError):  # a name no filesystem call takes (a lone surrogate, NUL)
        return "%s cannot be named on this filesystem" % text.shown(name)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return "it holds no %s" % text.shown(name)
        if e.errno in (errno.ELOOP, errno.EMLINK):
            return "%s is a symlink" % text.shown(name)
        return "%s cannot be read: %s" % (text.shown(name), e.strerror)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "%s is not a regular file" % text.shown(name)
        if st.st_size == 0:
            return "%s is empty (0 bytes)" % text.shown(name)
        key = (check.__name__, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in _CACHE:
            return _CACHE[key]
        try:
            why = check(fd, text.shown(name), st.st_size)
        except OSError as e:
            return "%s cannot be read: %s" % (text.shown(name), e.strerror)
        except (ValueError, struct.error, MemoryError) as e:  # changed under the read, or absurd
            return "%s cannot be judged: %s" % (text.shown(name), text.shown(str(e))[:120])
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = why
        return why
    finally:
        os.close(fd)


def file_problem(dir_fd: int, name: str) -> str | None:
    """Why the weights file `name` in the open folder is not a finished save, or None: by its
    suffix, a safetensors file or a zip archive (`.bin`, `.pt`, `.pth`)."""
    if name.endswith(".safetensors"):
        return _judge(dir_fd, name, _safetensors)
    if name.endswith((".bin", ".pt", ".pth")):
        return _judge(dir_fd, name, _zip)
    return "%s is not a weights file fleetdeck can judge (.safetensors or .bin)" % text.shown(name)


def safetensors_names(dir_fd: int, name: str) -> set[str] | None:
    """The tensor names in a safetensors file's header (already judged whole), or None."""
    try:
        fd = _open(dir_fd, name)
    except (OSError, ValueError, UnicodeError):
        return None
    try:
        st = os.fstat(fd)
        key = ("names", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in _CACHE:
            return _CACHE[key]
        head = _read_exact(fd, 8, 0)
        if len(head) < 8:
            return None
        n = struct.unpack("<Q", head)[0]
        if n > HEADER_LIMIT:
            return None
        header = json.loads(_read_exact(fd, n, 8).decode("utf-8"))
        names = set(k for k in header if k != "__metadata__") if isinstance(header, dict) else None
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = names
        return names
    except (OSError, ValueError, RecursionError, struct.error):
        return None
    finally:
        os.close(fd)


def _plain(shard: object) -> bool:
    if not isinstance(shard, str) or shard in ("", ".", "..") or "/" in shard or "\0" in shard:
        return False
    try:
        os.fsencode(shard)
    except (UnicodeError, ValueError):
        return False
    return True


def index_problem(dir_fd: int, name: str, raw: bytes) -> str | None:
    """Why the shard index `name` (its bytes `raw`) does not describe whole weights in the open
    folder, or None."""
    try:
        wmap = json.loads(raw.decode("utf-8"))["weight_map"]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return "%s cannot be read as a weight index" % text.shown(name)
    if not isinstance(wmap, dict) or not wmap:
        return "%s names no shard files" % text.shown(name)
    shards = {}  # type: dict
    for tensor, shard in wmap.items():
        if not _plain(shard):
            return "%s names %s, not a plain file name in the checkpoint" % (
                text.shown(name),
                text.shown(str(shard)[:80]),
            )
        if shard == name or shard in CONFIG_NAMES or shard.endswith(".json"):
            return "%s names %s as a shard, which holds no weights" % (
                text.shown(name),
                text.shown(shard),
            )
        shards.setdefault(shard, []).append(tensor)
    for shard in sorted(shards):
        why = file_problem(dir_fd, shard)
        if why:
            return why
        if shard.endswith(".safetensors"):
            have = safetensors_names(dir_fd, shard) or set()
            missing = [t for t in shards[shard] if t not in have]
            if missing:
                return "%s maps %s to %s, whose header lacks it%s" % (
                    text.shown(name),
                    text.shown(str(missing[0])[:80]),
                    text.shown(shard),
                    " (and %d more)" % (len(missing) - 1) if len(missing) > 1 else "",
                )
    return None
