"""What a mirror's report looks like in its modal: each file's status and digests, and the
verdict line (the modal's layout and workers are in `mirror`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.fmt import said

if TYPE_CHECKING:
    from fleetdeck.backend.actions.mirror.report import MirrorReport

STATUS_STYLE = {
    "copied": "green",
    "identical": "green",
    "mismatch": "bold red",
    "missing": "bold red",
    "extra": "yellow",
}


def typeable(path: str) -> str:
    """`path` as a field's starting value, or "" when it holds a control character or a byte
    that is not UTF-8: a field shows its value raw (an escape sequence in a run's name would
    reach the terminal) and no one could type such a name back anyway."""
    return path if path.isprintable() else ""


def digest_width(table_width: int, fixed: int) -> int:
    """How many characters of a sha256 one line of the files table holds: the two digest
    columns share what the other columns (`fixed` cells, with their padding) leave of a table
    `table_width` wide: the whole 64, else 32, 16 or 8 a line (the digest is never cut)."""
    room = (table_width - fixed - 4) // 2
    return next((n for n in (64, 32, 16) if n <= room), 8)


def digest_text(digest: object, chunk: int) -> Text:
    """A host's sha256, whole and escaped, `chunk` characters a line; `-` when there is none."""
    text = shown(str(digest)) if digest else "-"
    return Text("\n".join(text[i : i + chunk] for i in range(0, len(text), chunk)) or "-")


def fixed_width(rep: MirrorReport) -> int:
    """The cells the status, file and size columns take, each with its two cells of padding,
    and the scrollbar: what the digest columns share the rest of."""

    return (
        sum(
            2 + max([len(h), *(len(c) for c in col)])
            for h, col in (
                ("Status", ["would copy", *(str(f.status) for f in rep.files)]),
                ("File", [shown(str(f.path)) for f in rep.files]),
                ("Bytes", [size_short(f.bytes) for f in rep.files]),
            )
        )
        + 2
        + 4
    )


def verdict_text(rep: MirrorReport, src_host: str, dst_host: str, dry_run: bool) -> Text:
    """The verdict under the files table: what a dry run would copy, or what the copy proved."""
    t = Text()
    if dry_run:
        what = {
            "would-copy": f"would copy {size_short(rep.bytes_src)} to {dst_host}",
            "identical": f"{dst_host} already holds identical content",
        }.get(rep.result, said(rep.result))
        t.append(f"dry run, nothing copied: {what}. ", style="bold")
    else:
        t.append(
            "✔ verified: " if rep.verified else "✖ NOT verified: ",
            style="bold green" if rep.verified else "bold red",
        )
        if getattr(rep, "verified_by", None):  # what the verdict stands on: files and their count
            t.append(f"{rep.verified_by}; ")
        t.append(
            f"{size_short(rep.bytes_src)} ({rep.bytes_src} B) on {src_host}, "
            f"{size_short(rep.bytes_dst)} ({rep.bytes_dst} B) on {dst_host}"
        )
    if rep.rate:
        t.append(
            f"\ncopied {size_short(rep.bytes_copied)} in {rep.seconds:.1f} s "
            f"({size_short(rep.rate)}/s)"
        )
    if getattr(rep, "kept_as", None):
        t.append(
            f"\nthe old destination is kept as {shown(rep.kept_as)} on {dst_host}; remove it by hand once "
            "it is no longer needed",
            style="bold",
        )
    if rep.error or rep.reason:
        t.append(
            f"\n{said(rep.result)} ({said(rep.reason)}): {said(rep.error or '')}",
            style="bold red",
        )
    return t
