"""A folder nested thousands deep, made and removed without recursion."""

from __future__ import annotations

import os


def _nest(top, depth):
    """`depth` folders, each inside the last, made through descriptors (the path outgrows PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
    finally:
        os.close(fd)


def _unnest(top):
    """Remove the folders `_nest` made, one level at a time (no recursion, no long path)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while os.path.lexists(os.path.join(top, "d")):
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            try:
                if os.path.lexists(f"/proc/self/fd/{sub}/d"):
                    os.rename("d", "n", src_dir_fd=sub, dst_dir_fd=fd)
            finally:
                os.close(sub)
            os.rmdir("d", dir_fd=fd)
            if os.path.lexists(os.path.join(top, "n")):
                os.rename("n", "d", src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
