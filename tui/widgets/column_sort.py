"""Sort a table by a named column in one key, as htop, k9s and nvitop do: each column gets a
letter (underlined in its header), shift and that letter sorts by it, the same again turns the
direction; a click on a header does the same. The sorted column's header carries ▲ or ▼.

A mixin for `KeyedTable`, off unless the table is made with `column_sort=True` (a view whose
screen binds capital letters of its own keeps them): the letters are read from the key event
the focused table sees first, so no binding is added to any other widget. The mixin also holds
every table's filter and `o` sort, and saves both per view and table through the app's
`settings` (`tui/settings.py`), restoring them when the table mounts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.actions import SkipAction
from textual.widgets.data_table import ColumnKey


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


class ColumnSort:
    """Shift+letter and header clicks sort a `KeyedTable` by a named column; the filter and
    the sort, saved and restored."""

    column_sort = False
    _spec: list
    sort_by: tuple[int, bool] | None
    filter_text: str
    total_rows: int
    _view_keys: list
    app: Any
    id: str | None

    def letters(self) -> dict[str, int]:
        """Capital letter -> the index of the column it sorts by."""
        if not self.column_sort:
            return {}
        return {ch: i for i, ch in enumerate(sort_letters([s[1] for s in self._spec])) if ch}

    def sort_on(self, index: int) -> None:
        """Sort by column `index`: upward first, the other way when it already sorts by it."""
        if self.sort_by is not None and self.sort_by[0] == index:
            self.sort_by = (index, not self.sort_by[1])
        else:
            self.sort_by = (index, False)
        self.sort_changed()

    def column_labels(self) -> list[Any]:
        """The headers to show: with the letters and the sort's arrow when column sort is on."""
        if not self.column_sort:
            return [s[1] for s in self._spec]
        letters = sort_letters([s[1] for s in self._spec])
        out = []
        for i, (spec, ch) in enumerate(zip(self._spec, letters, strict=True)):
            arrow = ""
            if self.sort_by is not None and self.sort_by[0] == i:
                arrow = "▼" if self.sort_by[1] else "▲"
            out.append(header(spec[1], ch, arrow))
        return out

    def on_key(self, event: events.Key) -> None:
        ch = event.character
        if not self.column_sort or ch is None or len(ch) != 1 or not ("A" <= ch <= "Z"):
            return
        index = self.letters().get(ch)
        if index is not None:
            event.stop()
            event.prevent_default()
            self.sort_on(index)

    def on_data_table_header_selected(self, event: Any) -> None:
        if self.column_sort and event.data_table is self:
            event.stop()
            self.sort_on(event.column_index)

    # -- the operator's choices, saved and restored --------------------------------------------
    def _saved(self) -> tuple[Any, str] | None:
        settings = getattr(self.app, "settings", None)
        view = getattr(self.app, "view_name", None)
        if settings is None or view is None or not self.id:
            return None
        try:
            return settings, view(self.screen)
        except Exception:
            return None

    def _restore_choice(self) -> None:
        saved = self._saved()
        if saved is None:
            return
        settings, view = saved
        choice = settings.table(view, self.id)
        self.filter_text = choice.filter
        keys = [spec[0] for spec in self._spec]
        if choice.sort in keys:
            self.sort_by = (keys.index(choice.sort), choice.descending)

    def _choice_changed(self) -> None:
        saved = self._saved()
        if saved is not None:
            settings, view = saved
            sort = (
                self._spec[self.sort_by[0]][0]
                if self.sort_by is not None and self.sort_by[0] < len(self._spec)
                else None
            )
            try:
                settings.set_table(
                    view,
                    self.id,
                    sort=sort,
                    descending=bool(self.sort_by and self.sort_by[1]),
                    filter=self.filter_text,
                )
            except OSError as e:
                self.app.notify(
                    f"Settings not saved: {e}", title="Settings", severity="warning", markup=False
                )
        self.post_message(self.ChoiceChanged(self))

    def sort_changed(self) -> None:
        self._reapply()
        self._relabel()
        self._choice_changed()

    def _relabel(self) -> None:
        """The headers again (the sort's arrow moved)."""
        if not self.column_sort:
            return
        for spec, label in zip(self._spec, self.column_labels(), strict=True):
            col = self.columns.get(ColumnKey(spec[0]))
            if col is not None:
                col.label = label
        self._require_update_dimensions = True
        self._update_count += 1
        self.refresh()

    # -- filter and sort -----------------------------------------------------------------------
    def describe(self) -> str:
        """The filter and sort in words, for the title ('' when neither is set)."""
        parts = []
        if self.filter_text:
            parts.append(
                f"filter {self.filter_text!r} ({len(self._view_keys)} of {len(self._all_rows)})"
            )
        if self.sort_by is not None and self.sort_by[0] < len(self._spec):
            label = self._spec[self.sort_by[0]][1]
            label = (
                label.plain if isinstance(label, Text) else re.sub(r"\[[^\]]*\]", "", str(label))
            )
            parts.append(f"sorted by {label} {'↓' if self.sort_by[1] else '↑'}")
        return " · ".join(parts)

    def none_matched(self, noun: str) -> str | None:
        """`The filter 'x' matched 0 of 68 hosts (...)` while the filter lets no row of a table
        that has rows through (a view says it where it would say it has none); else None."""
        n = self.total_rows
        if not self.filter_text or not n or self._view_keys:
            return None
        return (
            f"The filter {self.filter_text!r} matched 0 of {n} {noun}{'' if n == 1 else 's'} "
            "(/ changes it, esc clears it)."
        )

    def set_filter(self, text: str) -> None:
        """Show only the rows whose shown text holds `text` (any case); '' shows every row."""
        self.filter_text = text
        self._reapply()
        self._choice_changed()

    def action_filter(self) -> None:
        from fleetdeck.tui.modals.filter_prompt import FilterPrompt

        self.app.push_screen(FilterPrompt(self))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # without a filter, esc is not this table's: the screen's esc (back, close) shows in
        # the footer and runs, as before
        if action == "clear_filter" and not self.filter_text:
            return False
        return super().check_action(action, parameters)

    def action_clear_filter(self) -> None:
        if not self.filter_text:
            raise SkipAction()
        self.set_filter("")

    def action_cycle_sort(self) -> None:
        n = len(self._spec)
        if self.sort_by is None:
            self.sort_by = (0, False)
        elif not self.sort_by[1]:
            self.sort_by = (self.sort_by[0], True)
        elif self.sort_by[0] + 1 < n:
            self.sort_by = (self.sort_by[0] + 1, False)
        else:
            self.sort_by = None
        self.sort_changed()


__all__ = ["ColumnSort", "header", "plain_label", "sort_letters"]
