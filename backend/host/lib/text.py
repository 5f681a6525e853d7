"""Display escaping: one `shown` for the CLI, the dashboard and the audit log alike."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os


def shown(p: object) -> str:
    """`p` (str or bytes) escaped so that no byte can disguise it.

    A backslash is doubled, so a name holding a literal backslash-n never reads like one
    holding a newline; control and other non-printable characters appear as `\\n`, `\\t`,
    `\\x1b`...; bytes that are not UTF-8 (kept as surrogates by `os.fsdecode`) appear as
    `\\xNN`. Printable text, non-ASCII letters included, is unchanged.
    """
    if p is None:
        return ""
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    p = str(p)
    if p.isprintable() and "\\" not in p:
        return p  # nothing to escape (a surrogate or a control character is not printable)
    out = []
    for ch in p:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif 0xDC80 <= o <= 0xDCFF:  # surrogateescape: an undecodable byte
            out.append("\\x%02x" % (o - 0xDC00))
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\u%04x" % o)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


def one_line(p: object) -> str:
    """A sentence part from a host that may already hold `shown` parts, as one line: what
    `shown` escapes is escaped, line breaks included, but a backslash is kept (so an escaped
    part is not escaped twice). None stays "" ."""
    if p is None:
        return ""
    p = str(p)
    if p.isprintable():
        return p
    return "".join(ch if ch == "\\" else shown(ch) for ch in p)


def fsdec(b: str | bytes) -> str:
    """Bytes from the filesystem or a crontab as str, undecodable bytes kept (surrogateescape)."""
    return b if isinstance(b, str) else b.decode("utf-8", "surrogateescape")


def fsenc(s: str | bytes) -> bytes:
    """The exact bytes behind a str made by `fsdec`."""
    return s if isinstance(s, bytes) else s.encode("utf-8", "surrogateescape")


def shown_short(b: object, limit: int = 120) -> str:
    """A line, path or tool message as it may appear in a sentence: `shown`, bounded to
    `limit` characters (then "...")."""
    s = shown(b if isinstance(b, (bytes, str)) else str(b))
    return s if len(s) <= limit else s[:limit] + "..."
