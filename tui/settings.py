"""The dashboard's remembered choices: `$XDG_CONFIG_HOME/fleetdeck/settings.toml`.

```toml
theme = "textual-dark"            # or textual-light, or any theme Textual knows

[views.runs.runs-table]           # [views.<view>.<table id>]
sort = "eta"                      # a column's key (the letter shown in its header sorts by it)
descending = false
filter = "gx10"
```

Strict, as the fleet file is: an unknown key, a wrong type or a syntax error is one warning
naming the file and the key, and the defaults are used; a file that was bad is never written
over (the operator's text is not lost), until it is fixed or removed. Written atomically (a
temporary file beside it, then renamed over it), so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from fleetdeck.backend.fleet.statedir import read_file

TABLE_KEYS = {"sort": str, "descending": bool, "filter": str}


@dataclass(frozen=True)
class TableChoice:
    """What the operator chose for one table: the sort column's key and direction, the filter."""

    #: the sort column's key, or None for the view's own order
    sort: str | None = None
    #: the sort runs downward (largest first)
    descending: bool = False
    #: the filter text ('' for none)
    filter: str = ""


@dataclass
class Settings:
    """Every remembered choice; `problem` is the sentence of a bad file (then nothing is saved)."""

    path: Path
    #: the theme's name, or None for Textual's default
    theme: str | None = None
    #: "<view>.<table id>" -> the table's choices
    tables: dict[str, TableChoice] = field(default_factory=dict)
    problem: str | None = None

    def table(self, view: str, table: str) -> TableChoice:
        """The choices for `table` in `view` (the defaults when none were saved)."""
        return self.tables.get(f"{view}.{table}", TableChoice())

    def set_table(self, view: str, table: str, **choice: object) -> bool:
        """Remember a table's choices; True when they changed (and were saved)."""
        key = f"{view}.{table}"
        new = replace(self.tables.get(key, TableChoice()), **choice)  # type: ignore[arg-type]
        if self.tables.get(key, TableChoice()) == new:
            return False
        self.tables[key] = new
        self.save()
        return True

    def set_theme(self, theme: str) -> None:
        """Remember the theme."""
        if theme != self.theme:
            self.theme = theme
            self.save()

    def dumps(self) -> str:
        """The file's text."""
        out = ["# fleetdeck dashboard settings: written by the dashboard as choices change"]
        if self.theme:
            out += ["", f"theme = {json.dumps(self.theme)}"]
        for key in sorted(self.tables):
            c = self.tables[key]
            if c == TableChoice():
                continue
            view, table = key.split(".", 1)
            out += ["", f"[views.{json.dumps(view)}.{json.dumps(table)}]"]
            if c.sort is not None:
                out += [
                    f"sort = {json.dumps(c.sort)}",
                    f"descending = {'true' if c.descending else 'false'}",
                ]
            if c.filter:
                out.append(f"filter = {json.dumps(c.filter)}")
        return "\n".join(out) + "\n"

    def save(self) -> None:
        """Write the file atomically; never over a file that was bad (see `problem`)."""
        if self.problem is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".settings.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.dumps())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def settings_path() -> Path:
    """`$XDG_CONFIG_HOME/fleetdeck/settings.toml` (default `~/.config`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "fleetdeck" / "settings.toml"


class SettingsError(ValueError):
    """A bad settings file: the message names the file and the key."""


def parse(text: str, path: Path) -> Settings:
    """The settings in `text`, or SettingsError naming the file and the key."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
    s = Settings(path)
    for key, value in doc.items():
        if key == "theme":
            if not isinstance(value, str) or not value:
                raise SettingsError(f"{path}: theme must be a theme's name, not {value!r}")
            s.theme = value
        elif key == "views":
            if not isinstance(value, dict):
                raise SettingsError(f"{path}: views must be a table of [views.<view>.<table>]")
            for view, tables in value.items():
                if not isinstance(tables, dict):
                    raise SettingsError(f"{path}: [views.{view}] must hold one table per table id")
                for table, choice in tables.items():
                    where = f"[views.{view}.{table}]"
                    if not isinstance(choice, dict):
                        raise SettingsError(
                            f"{path}: {where} must be a table (sort, descending, filter)"
                        )
                    for k, v in choice.items():
                        if k not in TABLE_KEYS:
                            raise SettingsError(
                                f"{path}: unknown key {k!r} in {where} "
                                f"(known: {', '.join(TABLE_KEYS)})"
                            )
                        if not isinstance(v, TABLE_KEYS[k]):
                            raise SettingsError(
                                f"{path}: {where} {k} must be a {TABLE_KEYS[k].__name__}, not {v!r}"
                            )
                    s.tables[f"{view}.{table}"] = TableChoice(
                        choice.get("sort"),
                        choice.get("descending", False),
                        choice.get("filter", ""),
                    )
        else:
            raise SettingsError(f"{path}: unknown key {key!r} (known: theme, views)")
    return s


def load(path: Path | None = None) -> Settings:
    """The saved settings; a missing file is the defaults, a bad one the defaults with
    `problem` set (its sentence, for a warning)."""
    path = path or settings_path()
    try:
        raw = read_file(path)  # a FIFO or a device there never hangs the dashboard
    except FileNotFoundError:
        return Settings(path)
    except OSError as e:
        return Settings(path, problem=f"{path}: {e.strerror or e}")
    try:
        return parse(raw.decode("utf-8"), path)
    except UnicodeDecodeError:
        return Settings(path, problem=f"{path}: not UTF-8 text")
    except SettingsError as e:
        return Settings(path, problem=str(e))


__all__ = ["Settings", "SettingsError", "TableChoice", "load", "parse", "settings_path"]
