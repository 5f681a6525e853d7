"""The one fd walker: a path followed one folder at a time from an open descriptor, each
component opened with O_DIRECTORY|O_NOFOLLOW, so no link anywhere along it is ever followed
and no component can be swapped for a link between a check and its use.

Callers keep their own refusals: `on_error(fd, i, name, err)` is called in the failing
open's `except` (raise there to refuse in the caller's words; returning re-raises the
OSError), `on_step(i, name, fd)` after each folder is opened (raise there to stop, e.g. on a
pin that differs). Every descriptor the walk opened is closed when it raises.
"""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from fleetdeck.backend.host.lib import flags

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any  # a component: str, or bytes where the caller walks bytes


def close_fds(*fds: int | None) -> None:
    """Close every descriptor given that is not None."""
    for fd in fds:
        if fd is not None:
            os.close(fd)


def descend(
    fd: int,
    names: Iterable[str | bytes],
    on_error: Callable[[int, int, Any, OSError], object] | None = None,
    on_step: Callable[[int, Any, int], object] | None = None,
    keep_parent: bool = True,
) -> tuple[int | None, int]:
    """Walk down `names` from the open folder `fd` (owned from here on: closed when the walk
    moves past it or fails). (parent_fd, fd): the last folder opened and, with `keep_parent`,
    the one above it (None when `names` is empty or without `keep_parent`)."""
    parent = None
    try:
        for i, name in enumerate(names):
            try:
                nfd = os.open(name, flags.DIR, dir_fd=fd)
            except OSError as e:
                if on_error is not None:
                    on_error(fd, i, name, e)
                raise
            if keep_parent:
                close_fds(parent)
                parent = fd
            else:
                os.close(fd)
            fd = nfd
            if on_step is not None:
                on_step(i, name, fd)
    except BaseException:
        close_fds(parent, fd)
        raise
    return parent, fd


def open_below(
    root: str | bytes,
    names: Iterable[str | bytes],
    on_error: Callable[[int, int, Any, OSError], object] | None = None,
    on_step: Callable[[int, Any, int], object] | None = None,
    keep_parent: bool = True,
) -> tuple[int | None, int]:
    """`descend` from the folder at the absolute path `root`, itself opened without
    following a link."""
    return descend(os.open(root, flags.DIR), names, on_error, on_step, keep_parent)
