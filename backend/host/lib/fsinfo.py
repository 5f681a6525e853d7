"""Mounts and free space: /proc/self/mountinfo read once, the same way everywhere."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import os
import re
from collections.abc import Iterable

_OCTAL = re.compile(rb"\\([0-7]{3})")


def unescape_mount(b: bytes) -> str:
    """A mountinfo field with its octal escapes (\\040 ...) decoded, as str (surrogateescape)."""
    return os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), b))


def read_mounts() -> list[tuple[str, str, str]]:
    """[(mount point, fstype, source)] from /proc/self/mountinfo, in mount order."""
    out = []  # type: list
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(b" - ")
        lf, rf = left.split(b" "), right.split(b" ")
        if len(lf) >= 5 and len(rf) >= 2:
            out.append((unescape_mount(lf[4]), os.fsdecode(rf[0]), unescape_mount(rf[1])))
    return out


#: folders that are never a purge root, nor anything inside them: the system's programs,
#: libraries and configuration, and the kernel's own filesystems (no run lives there)
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)
#: folders that are never a purge root themselves (a folder inside one may be): the root, the
#: folder of every user's home, and the system's runtime and variable data
SYSTEM_FOLDERS = ("/", "/home", "/run", "/var")


def system_folder(resolved: str) -> str | None:
    """The system folder an absolute, resolved path is (or lies in, for SYSTEM_TREES), or None."""
    if resolved in SYSTEM_FOLDERS or resolved in SYSTEM_TREES:
        return resolved
    return next((t for t in SYSTEM_TREES if resolved.startswith(t + "/")), None)


def under(p: str, top: str) -> bool:
    """True when p is top or lies below it (clean absolute paths, compared as strings)."""
    return p == top or p.startswith(top.rstrip("/") + "/")


def mount_of(
    path: str, mounts: Iterable[tuple[str, str, str]] | None = None
) -> tuple[str, str, str]:
    """(mount point, fstype, source) of the filesystem holding `path` (already resolved)."""
    best = ("/", "?", "?")
    for m in mounts if mounts is not None else read_mounts():
        if under(path, m[0]) and len(m[0]) >= len(best[0]):
            best = m
    return best


def mounts_inside(
    path: str, mounts: Iterable[tuple[str, str, str]] | None = None
) -> list[tuple[str, str, str]]:
    """Mount points strictly below `path`."""
    return [
        m
        for m in (mounts if mounts is not None else read_mounts())
        if m[0] != path and under(m[0], path)
    ]


def usage(path_or_fd: str | bytes | int) -> tuple[int, int, int]:
    """(total, used, free-for-unprivileged) bytes of the filesystem of a path or open fd."""
    v = os.statvfs(path_or_fd)
    total = v.f_blocks * v.f_frsize
    return total, total - v.f_bfree * v.f_frsize, v.f_bavail * v.f_frsize


def free_bytes(path_or_fd: str | bytes | int) -> int:
    """Bytes an unprivileged writer may still use on that filesystem."""
    return usage(path_or_fd)[2]
