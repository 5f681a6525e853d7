"""The dashboard's views by name, as the app registers them (`tui/app.py`): the number keys, `esc`,
the `:` command line (`tui/navigation.py`) and the help screen (`tui/modals/dialogs.py`) look a
view up here instead of importing its module, so that no view, and nothing a view imports, can
lead back to them round a circle of imports.

The registry holds classes, not copies of what they say: help reads each view's `BINDINGS` when
it is drawn, so a key added to a view shows in help with no other change."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from textual.screen import Screen


@dataclass(frozen=True)
class View:
    """One view: its `name` (its mode, and its word on the command line), its screen class, and
    the help sections that list its keys, each a heading and the classes whose `BINDINGS` it
    shows (the view's own and those of the widgets in it)."""

    name: str
    screen: type[Screen[Any]]
    #: a top-level view, one of the app's modes; False: a view opened over one (the Host view)
    mode: bool = True
    help: tuple[tuple[str, tuple[type[Any], ...]], ...] = ()


class ViewRegistry:
    """The views in the order they were registered (the order help lists them in)."""

    def __init__(self) -> None:
        self._views: dict[str, View] = {}

    def register(self, view: View) -> None:
        """Add `view`, or replace the one registered under its name."""
        self._views[view.name] = view

    def __iter__(self) -> Iterator[View]:
        return iter(tuple(self._views.values()))

    def screen(self, name: str) -> type[Screen[Any]]:
        """The screen class of the view named `name` (KeyError for none)."""
        return self._views[name].screen

    def modes(self) -> dict[str, str | Callable[[], Screen[Any]]]:
        """The top-level views by name: the app's `MODES` (typed as Textual types it)."""
        return {v.name: v.screen for v in self if v.mode}

    def shows(self, screen: object, name: str) -> bool:
        """Whether `screen` is the view named `name` (a subclass of its screen counts)."""
        view = self._views.get(name)
        return view is not None and isinstance(screen, view.screen)

    def is_view(self, screen: object) -> bool:
        """Whether `screen` is one of the registered views (not a pop-up or the command line)."""
        return isinstance(screen, tuple(v.screen for v in self))

    def name_of(self, screen: object) -> str | None:
        """The name of the view `screen` is exactly (None for a screen registered by no view)."""
        return next((v.name for v in self if type(screen) is v.screen), None)

    def help_sections(self) -> list[tuple[str, Sequence[type[Any]]]]:
        """Each view's help sections, in order: a heading and the classes whose keys it lists."""
        return [section for v in self for section in v.help]


#: the dashboard's views: filled by `tui/app.py` when it is imported
VIEWS = ViewRegistry()
