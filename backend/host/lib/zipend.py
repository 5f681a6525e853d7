"""A zip archive's end record, read with two bounded preads: how many members its central
directory names and how many bytes it takes, so that a caller can refuse a crafted directory
before `zipfile` reads it (zipfile builds an object per member of the whole directory first)."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import os
import struct


def members_and_size(fd: int, size: int) -> tuple[int, int] | None:
    """(members, central directory bytes) as the archive's end record says, read with two
    bounded preads before zipfile reads anything, or None where no end record is found (then
    zipfile says what is wrong). zipfile builds an object per member of the whole central
    directory before any of it can be refused, so a crafted directory is refused here first."""
    tail = min(size, 22 + 0xFFFF)  # the end record and the longest archive comment
    buf = os.pread(fd, tail, size - tail)
    at = buf.rfind(b"PK\x05\x06")
    if at < 0 or len(buf) - at < 22:
        return None
    members, cd_size = struct.unpack("<xxxxxxxxxxHI", buf[at : at + 16])
    if (members == 0xFFFF or cd_size == 0xFFFFFFFF) and at >= 20:
        loc = buf[at - 20 : at]  # the zip64 end record's locator sits just before
        if loc[:4] == b"PK\x06\x07":
            off = struct.unpack("<Q", loc[8:16])[0]
            rec = os.pread(fd, 56, off) if off + 56 <= size else b""
            if rec[:4] == b"PK\x06\x06" and len(rec) == 56:
                members, cd_size = struct.unpack("<QQ", rec[32:48])
    return members, cd_size
