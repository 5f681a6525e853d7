"""How `KeyedTable` draws its lines: DataTable's own segments, built with less work.

DataTable renders a cell again whenever any cell of the table changed, renders a multi-line row
one line at a time (working the row's styles out again for each), and passes every finished line
through a crop and a merge of same-style neighbours. `TableLines` caches a cell by the very
object shown (`KeyedTable.sync` keeps the object of a cell that did not change), builds a plain
Text cell's segments directly, builds all lines of a row at once, and skips the crop and merge
where a line needs neither. Every shortcut returns DataTable's segments: with
`FLEETDECK_CHECK_CELLS=1` each cell and line is rendered both ways and compared
(`tests/tui/test_tui_big_fleet.py`); anything outside the plain case takes DataTable's path.
`KeyedTable` owns one `TableLines` (`_lines`); its DataTable overrides are one call each into it.
"""

from __future__ import annotations

import os
from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import Row, RowKey

from fleetdeck.tui.widgets.table_store import TableStore
from fleetdeck.tui.widgets.text_cell import text_cell

#: a cell's lines of segments, as DataTable renders them
SegmentLines = list[list[Segment]]
#: one line of a row: its fixed cells' segments and the scrollable cells'
RowLine = tuple[SegmentLines, SegmentLines]

#: render each Text cell and each line both ways and compare (tests/tui/test_tui_big_fleet.py sets it)
_CHECK_FAST_CELLS = bool(os.environ.get("FLEETDECK_CHECK_CELLS"))


class TableLines:
    """The line renderer a `KeyedTable` owns and its DataTable overrides call: the render caches,
    and the row order and line offsets cached by the table's layout version (DataTable works
    them out again at each update). DataTable's own path is called as `DataTable.x(table, ...)`
    (what the table's `super()` would reach: its `TableStore` overrides none of these)."""

    def __init__(self, table: TableStore) -> None:
        self.table = table
        #: rendered cells keyed by their place, with the cell object drawn (see `render_cell`)
        self.content_cache: LRUCache[tuple[Any, ...], tuple[object, SegmentLines]] = LRUCache(4096)
        #: every line of a row, rendered at once (see `render_line_in_row`)
        self.row_lines_cache: LRUCache[tuple[Any, ...], list[RowLine]] = LRUCache(512)
        #: the widget's style while a frame is drawn (None outside `render_lines`)
        self.frame_style: RichStyle | None = None
        self._offsets: tuple[tuple[int, int], list[tuple[RowKey, int]]] = ((-1, -1), [])
        self._ordered: tuple[tuple[int, int], list[Row]] = ((-1, -1), [])

    def ordered_rows(self) -> list[Row]:
        """The rows in display order (cached until rows come, go, move or change height)."""
        t = self.table
        key = (t._layout_version, len(t._order))
        if self._ordered[0] != key:
            rows = t.rows
            self._ordered = (key, [rows[RowKey(k)] for k in t._order])
        return self._ordered[1]

    def y_offsets(self) -> list[tuple[RowKey, int]]:
        """(row key, line in the row) for each line of the table, cached as `ordered_rows`."""
        t = self.table
        key = (t._layout_version, len(t._order))
        if self._offsets[0] != key:
            out: list[tuple[RowKey, int]] = []
            for row in self.ordered_rows():
                if row.height == 1:
                    out.append((row.key, 0))
                else:
                    out += [(row.key, y) for y in range(row.height)]
            self._offsets = (key, out)
        return self._offsets[1]

    def render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: RichStyle,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        """`DataTable._render_cell`, cached by the cell object shown in its place."""
        # DataTable keys its cell cache by a table-wide update count, so after a poll that
        # changed one cell it renders every visible cell again. `sync()` keeps the very
        # object of a cell that did not change, so that object is a sound cache key: only
        # changed cells are rendered (measured in benchmarks/tui.py).
        t = self.table
        if row_index == -1 and column_index >= 0:
            # the header: DataTable renders it again after every update; its labels rarely change
            label = t.ordered_columns[column_index].label
            key: tuple[Any, ...] = (
                "header",
                column_index,
                id(label),
                base_style,
                width,
                cursor,
                hover,
                t._show_hover_cursor,
                t._pseudo_class_state,
                t.cursor_type,
                t.show_cursor,
                t.header_height,
                t.fixed_columns,
            )
            hit = self.content_cache.get(key)
            if hit is not None and hit[0] is label:
                if _CHECK_FAST_CELLS:
                    slow = DataTable._render_cell(
                        t, row_index, column_index, base_style, width, cursor, hover
                    )
                    assert [list(Strip(x).simplify()) for x in slow] == [
                        list(Strip(x).simplify()) for x in hit[1]
                    ]
                return hit[1]
            lines = DataTable._render_cell(
                t, row_index, column_index, base_style, width, cursor, hover
            )
            self.content_cache[key] = (label, lines)
            return lines
        if row_index < 0 or column_index < 0:
            return DataTable._render_cell(
                t, row_index, column_index, base_style, width, cursor, hover
            )
        row_key = t._row_locations.get_key(row_index)
        if row_key is not None and t._lazy.make is not None:
            t._lazy.fill_key(row_key)
        column_key = t._column_locations.get_key(column_index)
        row = t._data.get(row_key) if row_key is not None else None
        if row_key is None or row is None or column_key not in row:
            return DataTable._render_cell(
                t, row_index, column_index, base_style, width, cursor, hover
            )
        value = row[column_key]
        height = t.rows[row_key].height
        # by place, read while it holds the object cached: a new cell replaces its entry
        key = (
            row_key,
            column_key,
            row_index,
            base_style,
            width,
            cursor,
            hover,
            t._show_hover_cursor,
            t._pseudo_class_state,
            height,
            t.cursor_type,
            t.show_cursor,
        )
        hit = self.content_cache.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        fast = None
        if (
            isinstance(value, Text)
            and row_index >= t.fixed_rows
            and column_index >= t.fixed_columns
        ):
            fast = self._render_text_cell(
                value, row_index, column_index, base_style, width, cursor, hover, height
            )
        if fast is None:
            lines = DataTable._render_cell(
                t, row_index, column_index, base_style, width, cursor, hover
            )
        else:
            lines = fast
            if _CHECK_FAST_CELLS:
                slow = DataTable._render_cell(
                    t, row_index, column_index, base_style, width, cursor, hover
                )
                assert [list(Strip(x).simplify()) for x in slow] == [
                    list(Strip(x).simplify()) for x in lines
                ], (value, slow, lines)
        self.content_cache[key] = (value, lines)
        return lines

    def _render_text_cell(
        self,
        value: Text,
        row_index: int,
        column_index: int,
        base_style: RichStyle,
        width: int,
        cursor: bool,
        hover: bool,
        height: int,
    ) -> SegmentLines | None:
        """The segments DataTable renders for a Text cell, built directly (`text_cell`);
        None outside the plain case, which takes DataTable's path."""
        t = self.table
        console = t.app.console

        def styles() -> tuple[RichStyle, RichStyle | None]:
            # the cell's styles under the row's and the cursor's, as DataTable works them out
            component_style, post_style = t._get_styles_to_render_cell(
                False,
                False,
                False,
                hover,
                cursor,
                t.show_cursor,
                t._show_hover_cursor,
                t.cursor_foreground_priority == "css",
                t.cursor_background_priority == "css",
            )
            pre = console.get_style(
                base_style
                + RichStyle.from_meta({"row": row_index, "column": column_index})
                + component_style
            )
            post = console.get_style(post_style) if post_style is not None else None
            return pre, post

        return text_cell(value, width, t.cell_padding, height, console, styles)

    def render_lines(self, crop: Region) -> list[Strip]:
        """`DataTable.render_lines`, the widget's style looked up once for the frame."""
        # DataTable.render_line asks the DOM for the widget's style at every line; it is the same
        # for the whole frame
        t = self.table
        self.frame_style = t.rich_style
        try:
            return DataTable.render_lines(t, crop)
        finally:
            self.frame_style = None

    def render_line(self, y: int) -> Strip:
        """`DataTable.render_line`, with the frame's style."""
        t = self.table
        style = self.frame_style
        if style is None or t.fixed_rows:
            return DataTable.render_line(t, y)
        scroll_x, scroll_y = t.scroll_offset
        if y >= (t.header_height if t.show_header else 0):
            y += scroll_y
        return self.render_table_line(y, scroll_x, scroll_x + t.size.width, style)

    def render_table_line(self, y: int, x1: int, x2: int, base_style: RichStyle) -> Strip:
        """`DataTable._render_line`, less two passes over every segment of a line that needs
        neither: the crop (the line starts at column 0 and is cut to the width below) and the
        merge of neighbouring segments of one style (the compositor draws them the same)."""
        t = self.table
        try:
            row_key: RowKey | None
            row_key, y_in_row = t._get_offsets(y)
        except LookupError:
            row_key = None
        if row_key is not None and t._lazy.make is not None and row_key is not t._header_row_key:
            t._lazy.fill_key(row_key)  # a lazy row drawn: made now, before any cached line
        if x1 or t.fixed_columns or (t._labelled_row_exists and t.show_row_labels):
            return DataTable._render_line(t, y, x1, x2, base_style)
        width = t.size.width
        if row_key is None:
            return Strip.blank(width, base_style)
        cache_key = (
            y,
            x1,
            x2,
            width,
            t.cursor_coordinate,
            t.hover_coordinate,
            base_style,
            t.cursor_type,
            t._show_hover_cursor,
            t._update_count,
            t._pseudo_class_state,
        )
        hit = t._line_cache.get(cache_key)
        if hit is not None:
            return hit
        _, scrollable = self.render_line_in_row(
            row_key,
            y_in_row,
            base_style,
            cursor_location=t.cursor_coordinate,
            hover_location=t.hover_coordinate,
        )
        strip = Strip([seg for cell in scrollable for seg in cell]).adjust_cell_length(
            width, base_style
        )
        if _CHECK_FAST_CELLS:
            slow = DataTable._render_line(t, y, x1, x2, base_style)
            assert list(strip.simplify()) == list(slow), (strip, slow)
        t._line_cache[cache_key] = strip
        return strip

    def render_line_in_row(
        self,
        row_key: RowKey,
        line_no: int,
        base_style: RichStyle,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> RowLine:
        """`DataTable._render_line_in_row`, every line of a row rendered at once and cached."""
        # DataTable renders a row one line at a time and works out the row's styles again for
        # each line; a host with 8 GPUs is an 8-line row. Here the styles are worked out once
        # per row and every line of it is built in one go (the same segments: the snapshot
        # tests compare them). Header, row labels and fixed columns keep DataTable's path.
        t = self.table
        if t._lazy.make is not None and row_key is not t._header_row_key:
            t._lazy.fill_key(row_key)  # a lazy row drawn: its cells are made now
        if (
            row_key is t._header_row_key
            or t.fixed_columns
            or (t._labelled_row_exists and t.show_row_labels)
        ):
            return DataTable._render_line_in_row(
                t, row_key, line_no, base_style, cursor_location, hover_location
            )
        key = (
            row_key,
            base_style,
            cursor_location,
            hover_location,
            t.cursor_type,
            t.show_cursor,
            t._show_hover_cursor,
            t._update_count,
            t._pseudo_class_state,
            t.size.width,
        )
        lines = self.row_lines_cache.get(key)
        if lines is None:
            lines = self._render_row_lines(row_key, base_style, cursor_location, hover_location)
            self.row_lines_cache[key] = lines
        return lines[line_no] if line_no < len(lines) else lines[-1]

    def _render_row_lines(
        self,
        row_key: RowKey,
        base_style: RichStyle,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> list[RowLine]:
        t = self.table
        cursor_type = t.cursor_type
        should_highlight = t._should_highlight
        row_index = t._row_locations.get(row_key)
        if row_index is None:
            row_index = -1
        row_style = t._get_row_style(row_index, base_style)
        cells = []
        widths = 0
        for column_index, column in enumerate(t.ordered_columns):
            location = Coordinate(row_index, column_index)
            width = column.get_render_width(t)
            widths += width
            cells.append(
                self.render_cell(
                    row_index,
                    column_index,
                    row_style,
                    width,
                    cursor=should_highlight(cursor_location, location, cursor_type),
                    hover=should_highlight(hover_location, location, cursor_type),
                )
            )
        remaining = max(0, t.size.width - widths - t._row_label_column_width)
        if cursor_type != "row":
            return [
                DataTable._render_line_in_row(
                    t, row_key, i, base_style, cursor_location, hover_location
                )
                for i in range(max((len(c) for c in cells), default=1))
            ]
        extend_style, _ = t._get_styles_to_render_cell(
            row_index == -1,
            False,
            False,
            should_highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type),
            row_index == cursor_location.row,
            t.show_cursor,
            t._show_hover_cursor,
            False,
            False,
        )
        extend_style = row_style + extend_style
        extend_style += RichStyle.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        fill = [Segment(" " * remaining, extend_style)]
        height = max((len(c) for c in cells), default=1)
        return [([], [c[i] for c in cells] + [fill]) for i in range(height)]
