"""The table's filter and sort (`TableChoice`, tui/widgets/column_sort.py) on their own: which
rows they let through and in what order, how `o` cycles, how the sort follows its column when
the columns change, and how they read in the title. The table itself runs them in the view
tests (tests/tui/test_tui_column_sort.py); here no app is needed."""

from __future__ import annotations

from rich.text import Text

from fleetdeck.tui.widgets.column_sort import TableChoice

SPEC = [("host", "Host"), ("mem", "Mem", 8), ("state", "[b]State[/b]")]
ROWS = {
    "b": ("gpu-10", "2G", "idle"),
    "a": ("gpu-9", "512M", Text("busy")),
    "c": ("cpu-1", "1T", "idle"),
}


def test_the_filter_keeps_the_rows_whose_text_holds_it_in_any_case_and_their_order():
    choice = TableChoice()
    assert list(choice.view(ROWS)) == ["b", "a", "c"] and choice.view_keys == ["b", "a", "c"]
    choice.filter_text = "GPU"
    assert list(choice.view(ROWS)) == ["b", "a"]
    choice.filter_text = "busy"  # a Text cell is read by its plain text
    assert list(choice.view(ROWS)) == ["a"]
    assert choice.describe(SPEC, len(ROWS)) == "filter 'busy' (1 of 3)"
    choice.filter_text = "nothing"
    choice.view(ROWS)
    assert choice.none_matched("host", 3) == (
        "The filter 'nothing' matched 0 of 3 hosts (/ changes it, esc clears it)."
    )
    assert choice.none_matched("host", 0) is None


def test_the_sort_orders_numbers_by_size_and_names_naturally_both_ways():
    choice = TableChoice()
    choice.sort_on(1)
    assert list(choice.view(ROWS)) == ["a", "b", "c"]  # 512M < 2G < 1T
    choice.sort_on(1)  # the same column again: the other way
    assert choice.sort_by == (1, True) and list(choice.view(ROWS)) == ["c", "b", "a"]
    choice.sort_on(0)
    assert list(choice.view(ROWS)) == ["c", "a", "b"]  # gpu-9 before gpu-10
    assert choice.describe(SPEC, 3) == "sorted by Host ↑"


def test_o_cycles_each_column_up_then_down_then_the_views_own_order():
    choice = TableChoice()
    seen = []
    for _ in range(7):
        choice.cycle(len(SPEC))
        seen.append(choice.sort_by)
    assert seen == [(0, False), (0, True), (1, False), (1, True), (2, False), (2, True), None]
    choice.sort_by = (2, True)
    assert choice.describe(SPEC, 3) == "sorted by State ↓"  # markup dropped


def test_the_sort_follows_its_columns_key_when_the_columns_change():
    choice = TableChoice()
    choice.sort_by = (2, True)
    narrow = [("host", "Host"), ("state", "State")]
    choice.follow(SPEC, narrow)
    assert choice.sort_by == (1, True)
    choice.follow(narrow, [("host", "Host")])  # its column dropped: the view's own order
    assert choice.sort_by is None


def test_column_letters_and_headers_only_with_column_sort():
    assert TableChoice().letters(SPEC) == {}
    assert TableChoice().column_labels(SPEC) == ["Host", "Mem", "[b]State[/b]"]
    choice = TableChoice(column_sort=True)
    assert choice.letters(SPEC) == {"H": 0, "M": 1, "S": 2}
    choice.sort_on(1)
    labels = choice.column_labels(SPEC)
    assert [label.plain for label in labels] == ["Host", "Mem▲", "State"]
