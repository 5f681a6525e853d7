"""Sort a table by a named column in one key, as htop, k9s and nvitop do: each column gets a
letter (underlined in its header), shift and that letter sorts by it, the same again turns the
direction; a click on a header does the same. The sorted column's header carries ▲ or ▼.

`TableChoice`, the state a `KeyedTable` holds: column sort is off unless the table is made with
`column_sort=True` (a view whose screen binds capital letters of its own keeps them); the table
reads the letters from the key event it sees first when focused, so no binding is added to any
other widget. The choice also holds every table's filter and `o` sort, and saves both per view
and table through the app's `settings` (`tui/settings.py`), restored when the table mounts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widget import Widget

from fleetdeck.tui.widgets.cell_sort import plain, sort_key

#: a column as a table is given it: key, label and, for a fixed width, the width
ColumnSpec = tuple[str, str] | tuple[str, str, int]


def plain_label(label: Any) -> str:
    """A column label as text (markup dropped)."""
    if isinstance(label, Text):
        return label.plain
    try:
        return Text.from_markup(str(label)).plain
    except Exception:
        return str(label)


def sort_letters(labels: Sequence[Any]) -> list[str | None]:
    """One capital letter per column, the first of its label not taken by a column before it
    (then any of its key's; None when every one is taken or the label has no letter)."""
    taken: set[str] = set()
    out: list[str | None] = []
    for label in labels:
        got = None
        for ch in plain_label(label).upper():
            if "A" <= ch <= "Z" and ch not in taken:
                got = ch
                break
        if got is not None:
            taken.add(got)
        out.append(got)
    return out


def header(label: Any, letter: str | None, arrow: str = "") -> Text:
    """`label` with its sort letter underlined and `arrow` after it."""
    text = Text(plain_label(label))
    if letter is not None:
        at = text.plain.upper().find(letter)
        if at >= 0:
            text.stylize("underline", at, at + 1)
    if arrow:
        text.append(arrow, style="bold")
    return text


class TableChoice:
    """The operator's filter and sort of one `KeyedTable`, which owns it: the filter (any case,
    over each row's shown text), the sort (column index, downward), the keys they let through,
    and the column letters when the table is made with `column_sort=True`. The columns are the
    table's spec, handed to each method that reads them (they change with the terminal's
    width)."""

    def __init__(self, column_sort: bool = False) -> None:
        self.column_sort = column_sort
        self.filter_text = ""
        self.sort_by: tuple[int, bool] | None = None
        #: the keys the filter and sort let through, in their order (for the title's count)
        self.view_keys: list[str] = []

    def letters(self, spec: Sequence[ColumnSpec]) -> dict[str, int]:
        """Capital letter -> the index of the column it sorts by."""
        if not self.column_sort:
            return {}
        return {ch: i for i, ch in enumerate(sort_letters([s[1] for s in spec])) if ch}

    def sort_on(self, index: int) -> None:
        """Sort by column `index`: upward first, the other way when it already sorts by it."""
        if self.sort_by is not None and self.sort_by[0] == index:
            self.sort_by = (index, not self.sort_by[1])
        else:
            self.sort_by = (index, False)

    def cycle(self, n: int) -> None:
        """The next of `n` columns up, then down, then the view's own order (`o`)."""
        if self.sort_by is None:
            self.sort_by = (0, False)
        elif not self.sort_by[1]:
            self.sort_by = (self.sort_by[0], True)
        elif self.sort_by[0] + 1 < n:
            self.sort_by = (self.sort_by[0] + 1, False)
        else:
            self.sort_by = None

    def follow(self, old: Sequence[ColumnSpec], new: Sequence[ColumnSpec]) -> None:
        """The sort follows its column's key, not its place (a narrow terminal drops some)."""
        if self.sort_by is None:
            return
        key = old[self.sort_by[0]][0] if self.sort_by[0] < len(old) else None
        keys = [c[0] for c in new]
        self.sort_by = (keys.index(key), self.sort_by[1]) if key in keys else None

    def column_labels(self, spec: Sequence[ColumnSpec]) -> list[Any]:
        """The headers to show: with the letters and the sort's arrow when column sort is on."""
        if not self.column_sort:
            return [s[1] for s in spec]
        letters = sort_letters([s[1] for s in spec])
        out = []
        for i, (column, ch) in enumerate(zip(spec, letters, strict=True)):
            arrow = ""
            if self.sort_by is not None and self.sort_by[0] == i:
                arrow = "▼" if self.sort_by[1] else "▲"
            out.append(header(column[1], ch, arrow))
        return out

    def view(self, rows: Mapping[str, Sequence[Any]]) -> dict[str, Sequence[Any]]:
        """`rows` through the filter and the sort, in their order."""
        keys = list(rows)
        if self.filter_text:
            needle = self.filter_text.casefold()
            keys = [k for k in keys if needle in " ".join(plain(c) for c in rows[k]).casefold()]
        if self.sort_by is not None:
            i, down = self.sort_by
            keys.sort(key=lambda k: sort_key(rows[k][i] if i < len(rows[k]) else ""), reverse=down)
        self.view_keys = keys
        return {k: rows[k] for k in keys}

    def describe(self, spec: Sequence[ColumnSpec], total: int) -> str:
        """The filter and sort in words, for the title ('' when neither is set); `total` is
        how many rows the filter chose from."""
        parts = []
        if self.filter_text:
            parts.append(f"filter {self.filter_text!r} ({len(self.view_keys)} of {total})")
        if self.sort_by is not None and self.sort_by[0] < len(spec):
            label: Any = spec[self.sort_by[0]][1]
            label = (
                label.plain if isinstance(label, Text) else re.sub(r"\[[^\]]*\]", "", str(label))
            )
            parts.append(f"sorted by {label} {'↓' if self.sort_by[1] else '↑'}")
        return " · ".join(parts)

    def none_matched(self, noun: str, total: int) -> str | None:
        """`The filter 'x' matched 0 of 68 hosts (...)` while the filter lets none of `total`
        rows through (a view says it where it would say it has none); else None."""
        if not self.filter_text or not total or self.view_keys:
            return None
        return (
            f"The filter {self.filter_text!r} matched 0 of {total} {noun}"
            f"{'' if total == 1 else 's'} (/ changes it, esc clears it)."
        )

    # -- saved per view and table in the app's settings ----------------------------------------
    def load(self, widget: Widget, spec: Sequence[ColumnSpec]) -> None:
        """The filter and sort saved for `widget`'s view and id, when the app keeps settings."""
        saved = _saved(widget)
        if saved is None:
            return
        settings, view = saved
        choice = settings.table(view, widget.id)
        self.filter_text = choice.filter
        keys = [column[0] for column in spec]
        if choice.sort in keys:
            self.sort_by = (keys.index(choice.sort), choice.descending)

    def save(self, widget: Widget, spec: Sequence[ColumnSpec]) -> None:
        """Keep the filter and sort for `widget`'s view and id (a warning when the file
        cannot be written)."""
        saved = _saved(widget)
        if saved is None:
            return
        settings, view = saved
        sort = (
            spec[self.sort_by[0]][0]
            if self.sort_by is not None and self.sort_by[0] < len(spec)
            else None
        )
        try:
            settings.set_table(
                view,
                widget.id,
                sort=sort,
                descending=bool(self.sort_by and self.sort_by[1]),
                filter=self.filter_text,
            )
        except OSError as e:
            widget.app.notify(
                f"Settings not saved: {e}", title="Settings", severity="warning", markup=False
            )


def _saved(widget: Widget) -> tuple[Any, str] | None:
    """The app's settings and the name of `widget`'s view, or None when either is missing."""
    settings = getattr(widget.app, "settings", None)
    view = getattr(widget.app, "view_name", None)
    if settings is None or view is None or not widget.id:
        return None
    try:
        return settings, view(widget.screen)
    except Exception:
        return None


__all__ = ["ColumnSpec", "TableChoice", "header", "plain_label", "sort_letters"]
