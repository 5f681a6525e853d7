"""The history database's connection: its schema, opening it (WAL, a busy timeout), the ids of
its series, and what a failure does (a warning, never an exception; a database that is corrupt,
locked or unwritable is dropped and tried again `REOPEN_AFTER` seconds later). `History` writes
and reads through it.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, host TEXT NOT NULL, kind TEXT NOT NULL,
    name TEXT NOT NULL, UNIQUE (host, kind, name));
CREATE TABLE IF NOT EXISTS samples (t INTEGER NOT NULL, sid INTEGER NOT NULL, a REAL, b REAL,
    PRIMARY KEY (t, sid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS samples_10m (t INTEGER NOT NULL, sid INTEGER NOT NULL, a REAL, b REAL,
    PRIMARY KEY (t, sid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (t INTEGER NOT NULL, host TEXT NOT NULL, kind TEXT NOT NULL,
    subject TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_t ON events (t);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v REAL);
"""

REOPEN_AFTER = 600.0


class HistoryDB:
    """One history database, opened when first used; `_conn()` is None while it cannot be."""

    def __init__(self, path: Path, busy_ms: int = 250) -> None:
        self.path = path
        self.busy_ms = busy_ms
        self.warnings: list[str] = []
        #: what the last warning was about, in SQLite's or the system's words
        self.error: str | None = None
        self._db: sqlite3.Connection | None = None
        self._ids: dict[tuple[str, str, str], int] = {}
        self._failed_at: float | None = None
        #: when rows were last folded and dropped (kept in the database's `meta`)
        self._maintained_at = 0.0

    def _warn(self, what: str, e: BaseException) -> None:
        msg = f"history {self.path}: {what}: {e}"
        self.error = str(e)
        if msg not in self.warnings:
            self.warnings.append(msg)
        del self.warnings[:-20]

    def _conn(self) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        if self._failed_at is not None and time.monotonic() - self._failed_at < REOPEN_AFTER:
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                str(self.path),
                timeout=self.busy_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_ms)}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript(SCHEMA)
            self._ids = {
                (h, k, n): i for i, h, k, n in db.execute("SELECT id, host, kind, name FROM series")
            }
            row = db.execute("SELECT v FROM meta WHERE k = 'maintained_at'").fetchone()
            self._maintained_at = float(row[0]) if row else time.time()  # new: nothing to fold yet
        except (sqlite3.Error, OSError) as e:
            self._failed_at = time.monotonic()
            self._warn("cannot open it, polling goes on without history", e)
            return None
        self._db, self._failed_at = db, None
        return db

    def _fail(self, what: str, e: BaseException) -> None:
        self._warn(what, e)
        if isinstance(e, sqlite3.DatabaseError) and "locked" not in str(e) and "busy" not in str(e):
            self._drop()  # corrupt or gone: reopen later rather than fail every poll
            self._failed_at = time.monotonic()

    def _drop(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None
        self._ids = {}

    def _sid(self, db: sqlite3.Connection, host: str, kind: str, name: str) -> int:
        key = (host, kind, name)
        sid = self._ids.get(key)
        if sid is None:
            db.execute("INSERT OR IGNORE INTO series (host, kind, name) VALUES (?, ?, ?)", key)
            sid = db.execute(
                "SELECT id FROM series WHERE host = ? AND kind = ? AND name = ?", key
            ).fetchone()[0]
            self._ids[key] = sid
        return sid

    @staticmethod
    def _rollback(db: sqlite3.Connection) -> None:
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            pass


__all__ = ["REOPEN_AFTER", "SCHEMA", "HistoryDB"]
