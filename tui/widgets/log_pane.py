"""A log pane that can be searched (`/`, `n` / `N`), jumped through the lines that look like
trouble (`e` / `E`: a Traceback, a nan, an error) and wrapped (`w`), as in less and k9s.

The pane holds the lines it was given (already escaped by the caller: `host/lib/text.shown`);
what it draws are rows, one per line, or with wrap on as many as a line needs at the pane's
width. A search is plain text in any case; its matches are marked where they are drawn, and
the current one stands out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len, chop_cells
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Log

from fleetdeck.tui.modals.filter_prompt import FilterPrompt

#: a line worth jumping to: a Python traceback's first line, a nan figure, an error of any kind
PROBLEM = re.compile(r"Traceback|\bnan\b|error", re.IGNORECASE)
MATCH_STYLE = Style(color="black", bgcolor="yellow")
CURRENT_STYLE = Style(color="black", bgcolor="dark_orange", bold=True)
PROBLEM_STYLE = Style(bold=True, color="red")


class LogPane(Log):
    """A `Log` whose lines can be searched, jumped through and wrapped."""

    BINDINGS = [
        Binding(
            "slash",
            "filter",
            "Search",
            show=False,
            tooltip="in a log: search it (any case; enter keeps the search, esc clears it)",
        ),
        Binding(
            "n", "next_match", "Next", show=False, tooltip="in a log: the next match of the search"
        ),
        Binding(
            "N",
            "previous_match",
            "Previous",
            show=False,
            tooltip="in a log: the previous match of the search",
        ),
        Binding(
            "e",
            "next_problem",
            "Next problem",
            show=False,
            tooltip="in a log: the first, then the next line with a Traceback, a nan or an error",
        ),
        Binding(
            "E",
            "previous_problem",
            "Previous problem",
            show=False,
            tooltip="in a log: the previous line with a Traceback, a nan or an error",
        ),
        Binding(
            "w", "toggle_wrap", "Wrap", show=False, tooltip="in a log: wrap long lines, or cut them"
        ),
        Binding("g", "scroll_home", "Top", show=False, tooltip="in a log: its first line"),
        Binding("G", "scroll_end", "Bottom", show=False, tooltip="in a log: its last line"),
    ]

    class StatusChanged(Message):
        """The pane's search, wrap or position changed: `text` says it in a few words."""

        def __init__(self, pane: LogPane, text: str) -> None:
            super().__init__()
            self.pane = pane
            self.text = text

    def __init__(self, *, max_lines: int | None = None, **kw: Any) -> None:
        super().__init__(max_lines=None, **kw)
        #: the lines as given, the most recent `keep` of them
        self.source: list[str] = []
        self.keep = max_lines
        self.wrap = False
        #: the search (plain text, any case) and where its matches are: (line, start, end)
        self.filter_text = ""
        self.matches: list[tuple[int, int, int]] = []
        self.current: int | None = None
        #: the line the last jump (match or problem) landed on
        self.at_line: int | None = None
        #: one drawn row per entry: (line, first character, end character)
        self._rows: list[tuple[int, int, int]] = []
        self._first_row: list[int] = []
        self._wrapped_at = 0

    # -- lines in ------------------------------------------------------------------------------
    def clear(self) -> LogPane:
        self.source = []
        self.at_line = None
        super().clear()
        self._rebuild()
        return self

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> LogPane:
        at_end = self.is_vertical_scroll_end
        for line in lines:
            self.source.extend(line.splitlines() or [""])
        if self.keep is not None and len(self.source) > self.keep:
            cut = len(self.source) - self.keep
            del self.source[:cut]
            if self.at_line is not None:
                self.at_line = self.at_line - cut if self.at_line >= cut else None
        self._rebuild()
        follow = self.auto_scroll if scroll_end is None else scroll_end
        if follow and at_end and self.at_line is None and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            self.refresh()
        return self

    def set_lines(self, lines: list[str], keep_place: bool = False) -> None:
        """Show `lines` instead; `keep_place`: the same log read again, so a reader who moved
        away from its end (a match, a problem line, scrolled up) stays where they were."""
        stay = keep_place and (self.at_line is not None or not self.is_vertical_scroll_end)
        y, at = self.scroll_offset.y, self.at_line
        super().clear()
        self.source = []
        self.at_line = None
        if not stay:
            self.current = None
        self.write_lines(lines, scroll_end=not stay)
        if stay:
            self.at_line = at if at is not None and at < len(self.source) else None
            self.scroll_to(y=y, animate=False, immediate=True)
        self._say()

    def write_line(self, line: str, scroll_end: bool | None = None) -> LogPane:
        return self.write_lines([line], scroll_end)

    def write(self, data: str, scroll_end: bool | None = None) -> LogPane:
        return self.write_lines(data.split("\n"), scroll_end)

    @property
    def text(self) -> str:
        """Every line, as text (what a copy takes)."""
        return "\n".join(self.source)

    # -- rows drawn ----------------------------------------------------------------------------
    def _rebuild(self) -> None:
        """The drawn rows from the lines, the matches of the search in them, and the size."""
        width = max(8, self.scrollable_content_region.width or self.size.width or 80)
        rows: list[tuple[int, int, int]] = []
        first: list[int] = []
        widest = 0
        for i, line in enumerate(self.source):
            line = self._process_line(line)
            first.append(len(rows))
            if self.wrap and cell_len(line) > width:
                start = 0
                for piece in chop_cells(line, width):
                    rows.append((i, start, start + len(piece)))
                    start += len(piece)
                widest = max(widest, width)
            else:
                rows.append((i, 0, len(line)))
                widest = max(widest, cell_len(line))
        self._rows, self._first_row, self._wrapped_at = rows, first, width
        self._lines = [self._process_line(self.source[i])[a:b] for i, a, b in rows]
        self._width = widest
        self._find()
        self._render_line_cache.clear()
        self.virtual_size = Size(widest, len(rows))
        self.refresh()

    def on_resize(self) -> None:
        if self.wrap and self.scrollable_content_region.width != self._wrapped_at:
            self._rebuild()

    def _find(self) -> None:
        needle = self.filter_text.casefold()
        found: list[tuple[int, int, int]] = []
        if needle:
            for i, line in enumerate(self.source):
                hay = self._process_line(line).casefold()
                at = hay.find(needle)
                while at >= 0:
                    found.append((i, at, at + len(needle)))
                    at = hay.find(needle, at + max(1, len(needle)))
        self.matches = found
        if self.current is not None and self.current >= len(found):
            self.current = len(found) - 1 if found else None

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        if y in self._render_line_cache:
            return self._render_line_cache[y]
        if y >= len(self._rows):
            return Strip.blank(0, rich_style)
        i, a, b = self._rows[y]
        text = Text(self._lines[y], no_wrap=True)
        text.stylize(rich_style)
        if self.at_line == i and not self.filter_text:
            text.stylize(PROBLEM_STYLE)
        for n, (li, s, e) in enumerate(self.matches):
            if li == i and s < b and e > a:
                style = CURRENT_STYLE if n == self.current else MATCH_STYLE
                text.stylize(style, max(0, s - a), min(b, e) - a)
        strip = Strip(text.render(self.app.console), cell_len(self._lines[y]))
        self._render_line_cache[y] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._render_line_cache.clear()

    # -- search and jumps ----------------------------------------------------------------------
    def set_filter(self, text: str) -> None:
        """Search for `text` (any case; '' ends the search) and go to its first match at or
        after the top of what is on screen."""
        self.filter_text = text
        self.current = None
        self._find()
        if self.matches:
            top = self.scroll_offset.y
            after = [n for n, (i, _, _) in enumerate(self.matches) if self._first_row[i] >= top]
            self._go_match(after[0] if after else 0)
        self._render_line_cache.clear()
        self.refresh()
        self._say()

    def action_filter(self) -> None:
        self.app.push_screen(
            FilterPrompt(
                self, label="search /", placeholder="any case; enter keeps it, esc clears it"
            )
        )

    def _go_match(self, n: int) -> None:
        self.current = n
        line = self.matches[n][0]
        self.at_line = line
        self._show_line(line)

    def _show_line(self, line: int) -> None:
        row = self._first_row[line] if line < len(self._first_row) else 0
        # the line a third of the way down, so what led to it is on screen too
        self.scroll_to(
            y=max(0, row - self.scrollable_content_region.height // 3),
            animate=False,
            immediate=True,
        )
        self._render_line_cache.clear()
        self.refresh()

    def action_next_match(self) -> None:
        """The next match (after the last one, the first again)."""
        if not self.matches:
            self._say("no search: / starts one" if not self.filter_text else None)
            return
        self._go_match(0 if self.current is None else (self.current + 1) % len(self.matches))
        self._say()

    def action_previous_match(self) -> None:
        """The previous match (before the first, the last)."""
        if not self.matches:
            self._say("no search: / starts one" if not self.filter_text else None)
            return
        self._go_match(
            len(self.matches) - 1
            if self.current is None
            else (self.current - 1) % len(self.matches)
        )
        self._say()

    def problems(self) -> list[int]:
        """The lines that hold a Traceback, a nan or an error, in order."""
        return [i for i, line in enumerate(self.source) if PROBLEM.search(line)]

    def action_next_problem(self) -> None:
        """The first problem line, then the next one at each press (after the last: the first)."""
        self._jump_problem(1)

    def action_previous_problem(self) -> None:
        """The previous problem line."""
        self._jump_problem(-1)

    def _jump_problem(self, step: int) -> None:
        lines = self.problems()
        if not lines:
            self._say("no Traceback, nan or error in these lines")
            return
        if self.at_line is None:
            line = lines[0] if step > 0 else lines[-1]
        elif step > 0:
            line = next((i for i in lines if i > self.at_line), lines[0])
        else:
            line = next((i for i in reversed(lines) if i < self.at_line), lines[-1])
        self.filter_text, self.matches, self.current = "", [], None
        self.at_line = line
        self._show_line(line)
        self._say(f"problem {lines.index(line) + 1} of {len(lines)}: line {line + 1}")

    def action_toggle_wrap(self) -> None:
        """Wrap long lines at the pane's width, or cut them (and scroll sideways)."""
        line = (
            self._rows[self.scroll_offset.y][0]
            if self._rows and self.scroll_offset.y < len(self._rows)
            else None
        )
        self.wrap = not self.wrap
        self._rebuild()
        if line is not None:
            self.scroll_to(y=self._first_row[line], x=0, animate=False, immediate=True)
        self._say()

    def status(self) -> str:
        """The search and the wrap in a few words ('' when neither is on)."""
        parts = []
        if self.filter_text:
            if self.matches:
                n = 0 if self.current is None else self.current + 1
                parts.append(f"{self.filter_text!r}: match {n} of {len(self.matches)} (n/N)")
            else:
                parts.append(f"{self.filter_text!r}: no match in {len(self.source)} lines")
        if self.wrap:
            parts.append("wrapped")
        return " · ".join(parts)

    def _say(self, text: str | None = None) -> None:
        said = self.status()
        if text:
            said = f"{text} · {said}" if said else text
        self.post_message(self.StatusChanged(self, said))


__all__ = ["PROBLEM", "LogPane"]
