"""How `KeyedTable` draws its lines: DataTable's own segments, built with less work.

DataTable renders a cell again whenever any cell of the table changed, renders a multi-line row
one line at a time (working the row's styles out again for each), and passes every finished line
through a crop and a merge of same-style neighbours. `TableLines` caches a cell by the very
object shown (`KeyedTable.sync` keeps the object of a cell that did not change), builds a plain
Text cell's segments directly, builds all lines of a row at once, and skips the crop and merge
where a line needs neither. Every shortcut returns DataTable's segments: with
`FLEETDECK_CHECK_CELLS=1` each cell and line is rendered both ways and compared
(`tests/tui/test_tui_big_fleet.py`); anything outside the plain case takes DataTable's path.
"""

from __future__ import annotations

import os
from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.coordinate import Coordinate
from textual.strip import Strip
from textual.widgets.data_table import Row, RowKey

from fleetdeck.tui.widgets.text_cell import text_cell

#: render each Text cell and each line both ways and compare (tests/tui/test_tui_big_fleet.py sets it)
_CHECK_FAST_CELLS = bool(os.environ.get("FLEETDECK_CHECK_CELLS"))


class TableLines:
    """Mixin for `KeyedTable` (before DataTable in its bases): the rendering overrides, and the
    row order and line offsets cached by the table's layout version (DataTable works them out
    again at each update)."""

    @property
    def ordered_rows(self) -> list[Row]:
        """The rows in display order (cached until rows come, go, move or change height)."""
        key = (self._layout_version, len(self._order))
        if self._ordered[0] != key:
            rows = self.rows
            self._ordered = (key, [rows[RowKey(k)] for k in self._order])
        return self._ordered[1]

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        key = (self._layout_version, len(self._order))
        if self._offsets[0] != key:
            out: list[tuple[RowKey, int]] = []
            for row in self.ordered_rows:
                if row.height == 1:
                    out.append((row.key, 0))
                else:
                    out += [(row.key, y) for y in range(row.height)]
            self._offsets = (key, out)
        return self._offsets[1]

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Any,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        # DataTable keys its cell cache by a table-wide update count, so after a poll that
        # changed one cell it renders every visible cell again. `sync()` keeps the very
        # object of a cell that did not change, so that object is a sound cache key: only
        # changed cells are rendered (measured in benchmarks/tui.py).
        if row_index == -1 and column_index >= 0:
            # the header: DataTable renders it again after every update; its labels rarely change
            label = self.ordered_columns[column_index].label
            key = (
                "header",
                column_index,
                id(label),
                base_style,
                width,
                cursor,
                hover,
                self._show_hover_cursor,
                self._pseudo_class_state,
                self.cursor_type,
                self.show_cursor,
                self.header_height,
                self.fixed_columns,
            )
            hit = self._content_cache.get(key)
            if hit is not None and hit[0] is label:
                if _CHECK_FAST_CELLS:
                    slow = super()._render_cell(
                        row_index, column_index, base_style, width, cursor, hover
                    )
                    assert [list(Strip(x).simplify()) for x in slow] == [
                        list(Strip(x).simplify()) for x in hit[1]
                    ]
                return hit[1]
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._content_cache[key] = (label, lines)
            return lines
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        if self._make is not None and row_key is not None:
            self._fill_key(row_key)
        column_key = self._column_locations.get_key(column_index)
        row = self._data.get(row_key)
        if row is None or column_key not in row:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = row[column_key]
        key = (
            row_key,
            column_key,
            id(value),
            row_index,
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self.rows[row_key].height,
            self.cursor_type,
            self.show_cursor,
        )
        hit = self._content_cache.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        lines = None
        if (
            isinstance(value, Text)
            and row_index >= self.fixed_rows
            and column_index >= self.fixed_columns
        ):
            lines = self._render_text_cell(
                value,
                row_index,
                column_index,
                base_style,
                width,
                cursor,
                hover,
                self.rows[row_key].height,
            )
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        elif _CHECK_FAST_CELLS:
            slow = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            assert [list(Strip(x).simplify()) for x in slow] == [
                list(Strip(x).simplify()) for x in lines
            ], (value, slow, lines)
        self._content_cache[key] = (value, lines)
        return lines

    def _render_text_cell(
        self,
        value: Text,
        row_index: int,
        column_index: int,
        base_style: Any,
        width: int,
        cursor: bool,
        hover: bool,
        height: int,
    ) -> list[list[Segment]] | None:
        """The segments DataTable renders for a Text cell, built directly (`text_cell`);
        None outside the plain case, which takes DataTable's path."""
        console = self.app.console

        def styles() -> tuple[RichStyle, RichStyle | None]:
            # the cell's styles under the row's and the cursor's, as DataTable works them out
            component_style, post_style = self._get_styles_to_render_cell(
                False,
                False,
                False,
                hover,
                cursor,
                self.show_cursor,
                self._show_hover_cursor,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
            pre = console.get_style(
                base_style
                + RichStyle.from_meta({"row": row_index, "column": column_index})
                + component_style
            )
            post = console.get_style(post_style) if post_style is not None else None
            return pre, post

        return text_cell(value, width, self.cell_padding, height, console, styles)

    _frame_style: Any = None

    def render_lines(self, crop: Any) -> list[Strip]:
        # DataTable.render_line asks the DOM for the widget's style at every line; it is the same
        # for the whole frame
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None

    def render_line(self, y: int) -> Strip:
        style = self._frame_style
        if style is None or self.fixed_rows:
            return super().render_line(y)
        scroll_x, scroll_y = self.scroll_offset
        if y >= (self.header_height if self.show_header else 0):
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, style)

    def _render_line(self, y: int, x1: int, x2: int, base_style: Any) -> Strip:
        # DataTable's, less two passes over every segment of a line that needs neither: the crop
        # (the line starts at column 0 and is cut to the width below) and the merge of
        # neighbouring segments of one style (the compositor draws them the same)
        if x1 or self.fixed_columns or (self._labelled_row_exists and self.show_row_labels):
            return super()._render_line(y, x1, x2, base_style)
        width = self.size.width
        try:
            row_key, y_in_row = self._get_offsets(y)
        except LookupError:
            return Strip.blank(width, base_style)
        cache_key = (
            y,
            x1,
            x2,
            width,
            self.cursor_coordinate,
            self.hover_coordinate,
            base_style,
            self.cursor_type,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        hit = self._line_cache.get(cache_key)
        if hit is not None:
            return hit
        _, scrollable = self._render_line_in_row(
            row_key,
            y_in_row,
            base_style,
            cursor_location=self.cursor_coordinate,
            hover_location=self.hover_coordinate,
        )
        strip = Strip([seg for cell in scrollable for seg in cell]).adjust_cell_length(
            width, base_style
        )
        if _CHECK_FAST_CELLS:
            slow = super()._render_line(y, x1, x2, base_style)
            assert list(strip.simplify()) == list(slow), (strip, slow)
        self._line_cache[cache_key] = strip
        return strip

    def _render_line_in_row(
        self, row_key: Any, line_no: int, base_style: Any, cursor_location: Any, hover_location: Any
    ) -> tuple[list, list]:
        # DataTable renders a row one line at a time and works out the row's styles again for
        # each line; a host with 8 GPUs is an 8-line row. Here the styles are worked out once
        # per row and every line of it is built in one go (the same segments: the snapshot
        # tests compare them). Header, row labels and fixed columns keep DataTable's path.
        if self._make is not None and row_key is not self._header_row_key:
            self._fill_key(row_key)  # a lazy row drawn: its cells are made now
        if (
            row_key is self._header_row_key
            or self.fixed_columns
            or (self._labelled_row_exists and self.show_row_labels)
        ):
            return super()._render_line_in_row(
                row_key, line_no, base_style, cursor_location, hover_location
            )
        key = (
            row_key,
            base_style,
            cursor_location,
            hover_location,
            self.cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
            self.size.width,
        )
        lines = self._row_lines_cache.get(key)
        if lines is None:
            lines = self._render_row_lines(row_key, base_style, cursor_location, hover_location)
            self._row_lines_cache[key] = lines
        return lines[line_no] if line_no < len(lines) else lines[-1]

    def _render_row_lines(
        self, row_key: Any, base_style: Any, cursor_location: Any, hover_location: Any
    ) -> list[tuple[list, list]]:
        cursor_type = self.cursor_type
        should_highlight = self._should_highlight
        row_index = self._row_locations.get(row_key)
        if row_index is None:
            row_index = -1
        row_style = self._get_row_style(row_index, base_style)
        cells = []
        widths = 0
        for column_index, column in enumerate(self.ordered_columns):
            location = Coordinate(row_index, column_index)
            width = column.get_render_width(self)
            widths += width
            cells.append(
                self._render_cell(
                    row_index,
                    column_index,
                    row_style,
                    width,
                    cursor=should_highlight(cursor_location, location, cursor_type),
                    hover=should_highlight(hover_location, location, cursor_type),
                )
            )
        remaining = max(0, self.size.width - widths - self._row_label_column_width)
        if cursor_type == "row":
            extend_style, _ = self._get_styles_to_render_cell(
                row_index == -1,
                False,
                False,
                should_highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type),
                row_index == cursor_location.row,
                self.show_cursor,
                self._show_hover_cursor,
                False,
                False,
            )
            extend_style = row_style + extend_style
        else:
            return [
                super()._render_line_in_row(row_key, i, base_style, cursor_location, hover_location)
                for i in range(max((len(c) for c in cells), default=1))
            ]
        extend_style += RichStyle.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        fill = [Segment(" " * remaining, extend_style)]
        height = max((len(c) for c in cells), default=1)
        return [([], [c[i] for c in cells] + [fill]) for i in range(height)]


def one_line_each(cell: Any) -> Any:
    # DataTable wraps long cell text onto the next line, which breaks multi-line rows apart;
    # cut each line with an ellipsis instead (the detail panes carry the full text)
    if isinstance(cell, str):
        cell = Text(cell)
    if isinstance(cell, Text):
        cell.no_wrap = True
        cell.overflow = "ellipsis"
    return cell
