"""The open(2) flags every host module opens files and folders with, defined once.

A link is never followed where `NOFOLLOW` is part of the flags; every descriptor is
close-on-exec, so a subprocess started meanwhile never inherits one. (`payload` keeps its own
copy: the loader runs as plain source before any module can be imported.)
"""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import os

CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: read, following links (procfs, a folder's fsync)
READ = os.O_RDONLY | CLOEXEC
#: read a file, never through a link at its last component
READ_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | CLOEXEC
#: read a file found by a name someone else may swap: never through a link, never waiting on a
#: FIFO or a device put there (weights, a trainer's log)
READ_NOWAIT = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | CLOEXEC
#: open a folder, never through a link at its last component
DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | CLOEXEC
#: create a new file, never replacing or following anything at its name
CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC
