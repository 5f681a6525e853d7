"""The console a listing prints its table on: the terminal's width in a terminal; when stdout
is a pipe or a file, wide enough that no value is ever cut (`2.1G/23.4G`, never `2.1G/23.…`;
`run-with-a-long-name`, never `run-with-a-r…`): a script or a pager gets every value whole,
one row per line, whatever `COLUMNS` says (a run's name is what a script copies into the next
command)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

#: the width a table is laid out for when stdout is not a terminal: wider than any row
WHOLE = 4096


def listing_console(**kw: Any) -> Console:
    """A rich Console for a listing (see the module)."""
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        kw.setdefault("width", WHOLE)
    return Console(**kw)


__all__ = ["WHOLE", "listing_console"]
