"""Replacing a destination that exists: the partial folder is made beside it, and once
verified takes its place while the original is kept under its backup name (`Replacing.swap`).
`Replacing` is a part of `partial.Writer`, which calls it when its request names a
destination to replace; it works on the Writer's descriptors and names."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.mirror.abandon import clean_stale
from fleetdeck.backend.host.mirror.common import PARTIAL
from fleetdeck.backend.host.mirror.fdops import fsync_fd, rename_noreplace, stat_at


class Replacing:
    """The replace half of `partial.Writer`: its `prepare` and `commit` call these when
    the request names a destination to replace (`replace`, with its pin and backup name)."""

    if TYPE_CHECKING:  # what `partial.Writer` holds and does, which these methods use
        name: bytes
        parent: bytes
        backup: Any  # bytes when `replace` is set, the only time these methods run
        replace: Any  # a dict (pin, backup) when set, the only time these methods run
        root_mode: Optional[int]
        # descriptors and names: None until the Writer opened or made them, set before any of
        # these methods runs
        pfd: Any
        part_fd: Any
        part: Any
        partial: Optional[bytes]

        def make_partial(self, home: int, base: bytes, where: bytes) -> None: ...

        def tag(self, prefix: bytes) -> bytes: ...

        def check_place(self) -> None: ...

        def place_changed(self) -> Optional[Tuple[str, str]]: ...

    def prepare_replace(self, st: Optional[os.stat_result], kind: Optional[str]) -> List[str]:
        """A partial folder beside a destination that exists and will be replaced; the
        destination must still be the folder that was compared (its pin)."""
        if kind != "dir" or st is None or [st.st_dev, st.st_ino] != list(self.replace["pin"]):
            raise Refused(
                "dst-changed",
                "the destination is no longer the folder that was compared; nothing was changed",
            )
        if st.st_dev != os.fstat(self.pfd).st_dev:
            raise Refused(
                "dst-mounted",
                "the destination is a mount point, which cannot be renamed "
                "aside; replace what is inside it by hand",
            )
        if stat_at(self.pfd, os.path.basename(self.backup)) is not None:
            raise Refused(
                "dst-changed", "%s already exists; nothing was changed" % shown(self.backup)
            )
        prefix = b"." + self.name + PARTIAL
        stale = clean_stale(self.pfd, prefix, self.parent)
        self.make_partial(self.pfd, self.tag(prefix), self.parent)
        return stale

    def swap(self) -> None:
        """Put the verified partial folder in the destination's place, the destination kept
        under `backup`: first the destination is renamed aside, then the partial folder takes
        its name, each rename refusing to replace anything (renameat2 RENAME_NOREPLACE), the
        folder fsynced after each. A failure of the second rename puts the destination back;
        whatever happens, the original is under its own name or under `backup`, never gone.
        (RENAME_EXCHANGE would leave no instant without a destination, but a writer killed
        right after it would leave the original under the partial folder's name, which the
        next writer removes as stale: losing it is worse than a moment without the name.)"""
        pfd = self.pfd
        part = self.part
        back = os.path.basename(self.backup)
        st = stat_at(pfd, self.name)
        if (
            st is None
            or not stat.S_ISDIR(st.st_mode)
            or [st.st_dev, st.st_ino] != list(self.replace["pin"])
        ):
            raise Refused(
                "dst-changed", "the destination changed during the copy; it was not replaced"
            )
        self.check_place()
        if self.root_mode is not None:
            os.fchmod(self.part_fd, self.root_mode)
        try:
            rename_noreplace(pfd, self.name, pfd, back)
        except OSError as e:
            raise Refused(
                "swap-failed",
                "the destination could not be renamed aside to %s (%s); "
                "it is unchanged" % (shown(self.backup), e.strerror or e),
            ) from None
        fsync_fd(pfd)
        try:
            rename_noreplace(pfd, part, pfd, self.name)
        except OSError as e:
            why = e.strerror or str(e)
            try:
                rename_noreplace(pfd, back, pfd, self.name)
            except OSError as e2:
                raise Refused(
                    "swap-failed",
                    "the new copy could not take the destination's name "
                    "(%s), and the original could not be put back (%s): the original "
                    "is kept as %s" % (why, e2.strerror or e2, shown(self.backup)),
                ) from None
            fsync_fd(pfd)
            raise Refused(
                "swap-failed",
                "the new copy could not take the destination's name (%s); "
                "the original was put back under its name" % why,
            ) from None
        self.part = self.partial = None
        fsync_fd(pfd)
        bad = self.place_changed()
        if bad is not None:
            raise Refused(
                bad[0],
                "the destination's folder changed while the copy took its place "
                "(%s): the copy and the original (as %s) are in the folder that was "
                "opened, which the path no longer reaches" % (bad[1], shown(back)),
            )
