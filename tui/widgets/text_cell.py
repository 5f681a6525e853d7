"""The segments DataTable renders for a plain Text cell, built directly.

Rich's `Text.render` works the style stack out again at every span, which made an 8-line GPU
cell about 1.4 ms. `text_cell` builds the same segments (padding, the cell's styles under the
row's and the cursor's) for the plain case only: one line of text per row line that fits, left
justified, spans in order and apart. Anything else returns None and takes DataTable's path;
`TableLines` (table_lines.py) calls it and, with `FLEETDECK_CHECK_CELLS=1`, compares the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text


def text_cell(
    value: Text,
    width: int,
    pad: int,
    height: int,
    console: Console,
    cell_styles: Callable[[], tuple[RichStyle, RichStyle | None]],
) -> list[list[Segment]] | None:
    """`value` as `height` lines of segments `width` cells wide (`pad` each side), under the
    (pre, post) styles `cell_styles()` gives (asked only in the plain case); None outside it."""
    plain = value.plain
    inner = width - 2 * pad
    if (
        height < 1
        or inner < 1
        or value.justify not in (None, "default", "left")
        or "\t" in plain
        or plain.endswith("\n")
    ):
        return None
    spans = value.spans
    end = 0
    for span in spans:
        if span.start < end or span.end < span.start:
            return None  # overlapping or out of order: the style stack matters
        end = span.end
    lines_text = plain.split("\n")
    if any(cell_len(t) > inner for t in lines_text):
        return None  # cut with an ellipsis: DataTable's path
    pre, post = cell_styles()
    null = RichStyle.null()
    base = console.get_style(value.style, default=null) if value.style else null
    styles: dict[Any, RichStyle] = {}

    def final(style: Any) -> RichStyle:
        got = styles.get(style)
        if got is None:
            s = base if style is None else base + console.get_style(style, default=null)
            s = pre + s if pre else s
            if post:
                s = s + post if s else post
            styles[style] = got = s
        return got

    # the padding and the room right of the text carry no style of the cell's own
    s_pad = pre if pre else null
    if post:
        s_pad = s_pad + post if s_pad else post
    out: list[list[Segment]] = []
    offset = 0
    k = 0
    n_spans = len(spans)
    for line_no, text in enumerate(lines_text):
        if line_no >= height:
            break
        start, stop = offset, offset + len(text)
        segs = [Segment(" " * pad, s_pad)] if pad else []
        pos = start
        while k < n_spans and spans[k].end <= start:
            k += 1
        j = k
        while pos < stop:
            if j < n_spans and spans[j].start < stop:
                sp = spans[j]
                a, b = max(sp.start, start), min(sp.end, stop)
                if a > pos:
                    segs.append(Segment(plain[pos:a], final(None)))
                if b > a:
                    segs.append(Segment(plain[a:b], final(sp.style)))
                pos = max(pos, b)
                if sp.end <= stop:
                    j += 1
                else:
                    break
            else:
                segs.append(Segment(plain[pos:stop], final(None)))
                pos = stop
        if pos < stop:
            segs.append(Segment(plain[pos:stop], final(None)))
        room = inner - cell_len(text) + pad
        if room:
            segs.append(Segment(" " * room, s_pad))
        out.append(segs)
        offset = stop + 1
    while len(out) < height:
        out.append([Segment(" " * width, s_pad)])
    return out


def one_line_each(cell: Any) -> Any:
    # DataTable wraps long cell text onto the next line, which breaks multi-line rows apart;
    # cut each line with an ellipsis instead (the detail panes carry the full text)
    if isinstance(cell, str):
        cell = Text(cell)
    if isinstance(cell, Text):
        cell.no_wrap = True
        cell.overflow = "ellipsis"
    return cell
