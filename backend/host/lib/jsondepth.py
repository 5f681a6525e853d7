"""JSON nesting, bounded: how deep a JSON text nests, found without recursion before it is parsed.

`json.loads` recurses once per level of arrays and objects, so an answer nested some thousands
of levels deep ends in "maximum recursion depth exceeded" (a RecursionError, which no caller
expects from a parser). Every answer from a host (on the controller) and from a seat (on the
host) is measured here first: past `MAX_DEPTH` levels it is refused with `TooDeep`, reason code
`answer-too-deep`, before the parser sees it.

The measure is a few passes of bytes methods and the standard library's iterators (no
recursion, no Python loop per character): escapes are dropped, strings are cut out between
their quotes (an unterminated one runs to the end of the text), what is left is reduced to its
brackets, and the deepest running count of openers over closers is the depth.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import json
from itertools import accumulate

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any

#: the deepest nesting of arrays and objects an answer may have: a probe snapshot nests about
#: six levels, a completion with logprobs five
MAX_DEPTH = 64
CODE = "answer-too-deep"

#: every byte but the four brackets and the quote
_NOT_MARKS = bytes(c for c in range(256) if c not in b'[]{}"')
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


class TooDeep(ValueError):
    """A JSON text nested past the limit: refused before parsing."""

    code = CODE

    def __init__(self, depth: int, limit: int, what: str = "the answer") -> None:
        ValueError.__init__(
            self,
            "%s nests %d levels of arrays and objects, more than the %d "
            "a JSON answer may have; refused before parsing" % (what, depth, limit),
        )
        self.depth = depth
        self.limit = limit


def depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (str or bytes), outside strings."""
    data = _bytes(text)
    if data.count(b"[") + data.count(b"{") == 0:
        return 0
    # the escapes go first (each pair of backslashes, then each escaped quote): every quote
    # left opens or closes a string, so the text between the 1st and 2nd, 3rd and 4th... is
    # in strings, and an unterminated one runs to the end. A backslash outside a string is no
    # JSON: the parser stops at it, and before it this reads the text as the parser does.
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(None, _NOT_MARKS)  # brackets and quotes: a short text to cut
    brackets = b"".join(marks.split(b'"')[::2])
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def _bytes(text: str | bytes) -> bytes:
    # the brackets and quotes are ASCII: any text's UTF-8 bytes nest as the text does
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    return bytes(text)


def check(text: str | bytes, limit: int = MAX_DEPTH, what: str = "the answer") -> str | bytes:
    """Raise TooDeep when `text` nests deeper than `limit`; `text` otherwise."""
    # no more openers than the limit: it cannot nest deeper (the common case, no scan)
    if isinstance(text, str):
        openers = text.count("[") + text.count("{")
    else:
        openers = text.count(b"[") + text.count(b"{")
    if openers > limit:
        d = depth(text)
        if d > limit:
            raise TooDeep(d, limit, what)
    return text


def loads(text: str | bytes, limit: int = MAX_DEPTH, what: str = "the answer", **kw: Any) -> Any:
    """`json.loads(text, **kw)` after `check`: TooDeep past the limit, ValueError when not JSON."""
    return json.loads(check(text, limit, what), **kw)
