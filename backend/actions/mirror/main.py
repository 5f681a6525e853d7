"""Mirror a folder from one host to another and prove it, or only prove two folders identical.

Each host lists and hashes its own files from its own disk (the helper `host/mirror/main.py`,
bundled with the host library, fed JSON on stdin). The destination is never read through a
symlink; `follow_symlinks` applies to the source only. A copy streams through the controller
(no temporary copy here) into a hidden partial folder beside the destination, where every file
is fsynced and hashed again; only when every size and sha256 matched, the partial folder holds
exactly the source's files and folders, and the source did not change while it was read (size,
mtime, ctime, inode; walked again after the copy) does the partial folder take the
destination's name. No wait is without a limit. docs/mirror.md lists each guarantee with the
test that proves it.
"""

from __future__ import annotations

import re
from typing import Any

from fleetdeck.backend.actions.mirror.attempt import Attempt, check_typed, replaced_name
from fleetdeck.backend.actions.mirror.common import MirrorFail, Progress
from fleetdeck.backend.actions.mirror.report import MirrorReport
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink

__all__ = ["mirror", "parse_endpoint", "replaced_name"]

_ENDPOINT = re.compile(r"([A-Za-z0-9._-]+):(.*)", re.DOTALL)


def parse_endpoint(text: str) -> tuple[str, str]:
    """`HOST:PATH` -> (host, path); the path is everything after the first colon, literally.

    ValueError (with a sentence) when the host name is not `[A-Za-z0-9._-]+` or the path is empty.
    """
    m = _ENDPOINT.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not HOST:PATH (host names hold only letters, digits, '.', '_', '-')"
        )
    if not m.group(2):
        raise ValueError(f"{text!r} names no path after the colon")
    return m.group(1), m.group(2)


async def mirror(
    src_link: HostLink,
    src_path: str,
    dst_link: HostLink,
    dst_path: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    follow_symlinks: bool = False,
    allow_outside_links: bool = False,
    replace: bool = False,
    confirmation: dict[str, Any] | None = None,
) -> MirrorReport:
    """Copy SRC to DST (created if absent) and prove it; see the module docstring.

    DST already identical: a verified no-op (`identical`). DST holding anything else: refused
    (`dst-differs`), untouched, unless `replace`: then the copy fills a partial folder beside
    DST, is proven there by sha256 on each host, DST is renamed aside to
    `<DST>.replaced-<UTC time>` and the copy takes its name; DST is listed and hashed again,
    and the report (`replaced`, `kept_as`) says where the old copy is (it is never deleted).
    DST that is SRC itself on disk is refused (`dst-is-src`) whatever is asked.
    `progress(bytes_done, bytes_total)` is called while copying. `confirmation` (how the
    operator confirmed a replace, and what was typed) goes into the audit record. Every mirror
    that is not a dry run is audited: intent before copying, result after.
    Never raises for an expected failure (see `verify`).
    """
    attempt = Attempt(
        src_link,
        src_path,
        dst_link,
        dst_path,
        dry_run,
        progress,
        follow_symlinks,
        allow_outside_links,
        replace,
        confirmation,
    )
    try:
        check_typed(replace, dry_run, confirmation, dst_path)
        src, dst = await attempt.survey()
        src, dst, same = await attempt.judge_existing(src, dst)
        rep = same if same is not None else await attempt.decide(src, dst)
    except (MirrorFail, HostError) as e:
        rep = attempt.ended(e)
    return attempt.finish(rep)
