"""The private DataTable members KeyedTable relies on keep the shape it was written against.

`tui/widgets/keyed_table.py` and its base `table_store.py` (the rows' store and order) override
private members of Textual's DataTable, and they and the collaborators the table owns,
`tui/widgets/table_lines.py` (rendering), `row_sync.py` (rows synced by key), `lazy_rows.py`
and `column_sort.py` (filter and sort), call them and read DataTable's
private state (its render caches, row locations, cell store). Those may change in any release, so the runtime
requirement pins textual exactly, and this test fails loudly, naming the member, when a bumped
pin brings a different shape; it also fails when the table starts to use a private member this
contract does not list.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import tomllib
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import DataTable
from textual.widgets.data_table import Column, ColumnKey, RowKey

from fleetdeck.tui.widgets.keyed_table import KeyedTable

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "tui" / "widgets" / name
    for name in (
        "keyed_table.py",
        "table_store.py",
        "table_lines.py",
        "row_sync.py",
        "column_sort.py",
        "lazy_rows.py",
    )
]
#: the names the sources reach the table by: itself (`self`) in keyed_table.py, `t` (their
#: `self.table`) in its collaborators, which call DataTable's own methods as `DataTable.x(t, ...)`
TABLE_NAMES = {"self", "t", "DataTable"}

#: private DataTable methods KeyedTable overrides or calls, with their parameters
METHODS = {
    "_render_cell": ["self", "row_index", "column_index", "base_style", "width", "cursor", "hover"],
    "_render_line_in_row": [
        "self",
        "row_key",
        "line_no",
        "base_style",
        "cursor_location",
        "hover_location",
    ],
    "_render_line": ["self", "y", "x1", "x2", "base_style"],
    "_get_offsets": ["self", "y"],
    "_should_highlight": ["self", "cursor", "target_cell", "type_of_cursor"],
    "_get_row_style": ["self", "row_index", "base_style"],
    "_highlight_cursor": ["self"],
    "_get_styles_to_render_cell": [
        "self",
        "is_header_cell",
        "is_row_label_cell",
        "is_fixed_style_cell",
        "hover",
        "cursor",
        "show_cursor",
        "show_hover_cursor",
        "has_css_foreground_priority",
        "has_css_background_priority",
    ],
}
#: private DataTable state KeyedTable reads or writes, with the type it expects
STATE = {
    "_data": dict,
    "_row_locations": "TwoWayDict",
    "_column_locations": "TwoWayDict",
    "_updated_cells": set,
    "_require_update_dimensions": bool,
    "_update_count": int,
    "_header_row_key": RowKey,
    "_labelled_row_exists": bool,
    "_show_hover_cursor": bool,
    "_row_label_column_width": int,
    "_pseudo_class_state": object,
    "_line_cache": "LRUCache",
    "_cell_render_cache": "LRUCache",
    "_row_render_cache": "LRUCache",
    "_row_renderable_cache": "LRUCache",
}


def runtime_pin(name: str) -> str:
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (req,) = [
        r
        for r in proj["dependencies"]
        if r.split("=")[0].split(">")[0].split("<")[0].strip() == name
    ]
    assert "==" in req, f"the runtime requirement {req!r} must pin the version the tests ran"
    return req.split("==", 1)[1].strip()


def test_textual_is_pinned_to_the_version_the_tests_run():
    pin = runtime_pin("textual")
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "dev"
    ]
    assert f"textual=={pin}" in dev, "the runtime and dev pins of textual differ"
    assert importlib.metadata.version("textual") == pin


def test_the_contract_lists_every_private_member_the_table_uses():
    """Each `self._x` / `super()._x` / `t._x` / `DataTable._x` in the table's sources that
    DataTable (not KeyedTable) defines is in METHODS or STATE: a new dependency on a private
    member is added here with its shape."""
    own = set()
    used = set()
    tree = ast.parse("\n".join(p.read_text() for p in SOURCES))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            own.add(node.name)
        if isinstance(node, ast.Assign) or isinstance(node, ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in TABLE_NAMES
                        and sub.attr.startswith("_")
                        and not hasattr(DataTable, sub.attr)
                        and sub.attr not in STATE
                    ):
                        own.add(sub.attr)  # KeyedTable's own state (`_cells`, `_spec`, ...)
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            base = node.value
            if (isinstance(base, ast.Name) and base.id in TABLE_NAMES) or (
                isinstance(base, ast.Call)
                and isinstance(base.func, ast.Name)
                and base.func.id == "super"
            ):
                used.add(node.attr)
    from_datatable = {n for n in used if n not in own or n in METHODS}
    unlisted = sorted(from_datatable - set(METHODS) - set(STATE))
    assert not unlisted, (
        f"keyed_table.py uses private DataTable members the contract does not list: {unlisted}"
    )
    assert set(METHODS) <= used and {n for n in STATE} <= used, (
        "the contract lists members the table no longer uses"
    )


def test_each_private_method_keeps_its_parameters():
    for name, params in METHODS.items():
        assert hasattr(DataTable, name), f"DataTable.{name} is gone"
        got = list(inspect.signature(getattr(DataTable, name)).parameters)
        assert got == params, f"DataTable.{name} changed its parameters: {got}, expected {params}"
        mine = KeyedTable.__dict__.get(name)
        if mine is not None:  # an override keeps the parameters of what it overrides
            assert list(inspect.signature(mine).parameters) == params, name


def test_the_layout_properties_it_replaces_are_still_properties():
    """KeyedTable caches the line offsets and the ordered rows by its own layout version: the
    DataTable members it replaces must still be the properties the rest of DataTable reads."""
    for name in ("_y_offsets", "ordered_rows"):
        assert isinstance(inspect.getattr_static(DataTable, name), property), name
        assert isinstance(inspect.getattr_static(KeyedTable, name), property), name
    assert {"key", "height", "label", "auto_height"} <= set(
        inspect.signature(__import__("textual.widgets.data_table", fromlist=["Row"]).Row).parameters
    )


def test_the_private_helpers_it_imports_keep_their_shape():
    from textual._two_way_dict import TwoWayDict

    d = TwoWayDict({RowKey("a"): 0, RowKey("b"): 1})
    assert d.get(RowKey("b")) == 1 and d.get_key(0) == RowKey("a")
    assert list(inspect.signature(Column.get_render_width).parameters) == ["self", "data_table"]
    assert {"key", "label", "width", "content_width", "auto_width"} <= set(
        Column.__dataclass_fields__
    )


class _Host(App):
    def compose(self) -> ComposeResult:
        yield KeyedTable([("name", "Name"), ("gpu", "GPU", 6)], id="t")


async def test_each_private_attribute_exists_with_the_type_the_table_expects():
    from textual._two_way_dict import TwoWayDict
    from textual.cache import LRUCache

    app = _Host()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one("#t", KeyedTable)
        table.sync({"h1": ("h1", "0/80"), "h2": ("h2", "1/80")}, {"h2": 2})
        await pilot.pause()
        for name, kind in STATE.items():
            assert hasattr(table, name), f"DataTable no longer has {name}"
            expect = {"TwoWayDict": TwoWayDict, "LRUCache": LRUCache}.get(kind, kind)
            assert isinstance(getattr(table, name), expect), (name, type(getattr(table, name)))
        # the cell store and the row order are keyed as sync() writes them
        assert table._data[RowKey("h1")][ColumnKey("gpu")].plain == "0/80"
        assert (
            table._row_locations.get_key(1) == RowKey("h2")
            and table._row_locations.get(RowKey("h1")) == 0
        )
        assert table._column_locations.get_key(0) == ColumnKey("name")
        # what sync() changed is what the table renders, row heights and order included
        table.sync({"h2": ("h2", "9/80"), "h1": ("h1", "0/80")}, {"h2": 1})
        await pilot.pause()
        assert table.keys == ["h2", "h1"] and table.get_cell("h2", "gpu").plain == "9/80"
        assert table.rows[RowKey("h2")].height == 1


def test_the_footer_it_extends_keeps_its_shape():
    """`KeyFooter` (tui/widgets/key_footer.py) overrides `Footer.bindings_changed(screen)` and
    reads `_bindings_ready`, which Footer sets there and reads in `compose`."""
    from textual.widgets import Footer

    assert list(inspect.signature(Footer.bindings_changed).parameters) == ["self", "screen"]
    source = inspect.getsource(Footer)
    assert "self._bindings_ready = True" in source and "if not self._bindings_ready" in source


async def test_the_cursor_stays_on_its_row_when_rows_above_it_go_or_come():
    """A row above the cursor leaving the list used to slide the cursor onto its neighbour
    (rows were removed before the cursor's key was read), so a key press named another row."""
    app = _Host()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one("#t", KeyedTable)
        table.sync({k: (k, "0") for k in ("a", "b", "c", "d")})
        await pilot.pause()
        table.move_cursor(row=2)
        assert table.current_key == "c"
        table.sync({k: (k, "0") for k in ("b", "c", "d")})  # a row above goes
        await pilot.pause()
        assert table.current_key == "c"
        table.sync({k: (k, "0") for k in ("x", "d", "c")})  # one goes, one comes, order moves
        await pilot.pause()
        assert table.current_key == "c"
        table.sync({k: (k, "0") for k in ("y", "z", "c")})  # two above replaced, same order
        await pilot.pause()
        assert table.current_key == "c"
