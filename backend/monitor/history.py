"""Poll history in SQLite (stdlib `sqlite3`, WAL) under the state folder: bounded, never fatal.

What is kept, per series: GPU memory (the minute's peak) and utilisation (its mean) per card,
its temperature (peak) and power (mean) where the driver reports them (kind `gpuh`), disk use per configured root, run step and loss, each new eval loss, seat restarts and memory,
host up (the share of polls answered) and latency; seat checks and alert transitions as events.
Polls are folded into one row per series per minute in memory and written when the minute
ends: a 5 s poll costs no disk write, and a sparkline of the last hour is 60 points, which is
what the dashboard draws. Rows are `(time, series, a, b)` in a WITHOUT ROWID table keyed by
time first, so writes append and pages stay full (keyed by series first, the same week took
half as much room again).

Bounded: minute rows older than `raw_hours` (24) are folded into ten-minute rows by the same
rule as a minute's polls (`history_figures.FIGURES`: the newest loss and disk figure, the peak
GPU memory, the mean utilisation), and everything past the retention is dropped; both run at most
once an hour. The size of a week at 5 s polls of 50 hosts is measured by `benchmarks/alerts.py --size`
(docs/seats-alerts.md). A database that is corrupt, locked or unwritable is a warning
(`History.warnings`), never an exception: the poller goes on without history and tries to
reopen it ten minutes later.

Reading a window never holds its rows: the chart's cells and each figure's first, last and peak
are one GROUP BY in SQLite (`chart`, `_CHART`), and `--json`'s rows come a chunk at a time
(`stream`), so `fleetdeck history --since 2w` over 3 M rows stays at about 56 MiB
(`benchmarks/history_big.py`). `series` (every row, in lists) is for short windows: the alert
rules' disk rate and the dashboard's last hour.

What a host says reaches the database through two rules, one for text (`sql_text`) and one for
numbers (`sql_number`), applied to every value written; docs/probe.md ("Sinks") says why.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.monitor.history_figures import (
    FIGURES,
    Line,
    cell,
    fold_in,
    fold_of,
    fold_out,
)

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
MAINTAIN_EVERY = 3600.0
REOPEN_AFTER = 600.0
BUCKET = 60
FOLD = 600


def _fold_sql(i: int) -> str:
    """Figure `i` of a ten-minute row, from the per-block aggregates of `maintain`'s `g`: by
    kind, as `FIGURES` says (a kind not named keeps its newest value)."""
    c = "ab"[i]
    whens = "".join(
        f" WHEN '{kind}' THEN {c}{figs[i][1]}"
        for kind, figs in FIGURES.items()
        if figs[i][1] != "last"
    )
    return f"CASE kind{whens} ELSE (SELECT {c} FROM samples y WHERE y.t = g.t{c} AND y.sid = g.sid) END"


# the newest value of a block is read back by its row's key (t, sid): a lookup, not a scan
_FOLD_10M = (
    "WITH g AS (SELECT x.t / ?1 * ?1 AS t, x.sid AS sid, s.kind AS kind,"
    " max(x.a) AS amax, avg(x.a) AS amean, max(CASE WHEN x.a IS NOT NULL THEN x.t END) AS ta,"
    " max(x.b) AS bmax, avg(x.b) AS bmean, max(CASE WHEN x.b IS NOT NULL THEN x.t END) AS tb"
    " FROM samples x JOIN series s ON s.id = x.sid WHERE x.t < ?2 GROUP BY x.t / ?1, x.sid)"
    f" INSERT OR REPLACE INTO samples_10m SELECT t, sid, {_fold_sql(0)}, {_fold_sql(1)} FROM g"
)


# -- reading a window without holding its rows ---------------------------------------------------
#: a figure as a finite number, else NULL, whatever a writer other than this one left there (text,
#: a blob, an infinity): text and blobs sort above every number, 9e999 reads as infinity
_NUM = "CASE WHEN {c} > -9e999 AND {c} < 9e999 THEN {c} END"
# the rows of one host since ?1, ten-minute and minute rows together
_WINDOW = (
    "SELECT sid, t, {a} AS a, {b} AS b FROM {table} WHERE t >= ?1"
    " AND sid IN (SELECT id FROM series WHERE host = ?2)"
)


def _at(c: str, when: str) -> str:
    """Figure `c` of the row of `g`'s series at time `g.<when>`: a lookup by the row's key (t,
    sid), a minute row first."""
    return (
        " coalesce("
        + ", ".join(
            f"(SELECT {_NUM.format(c='y.' + c)} FROM {table} y WHERE y.t = g.{when}"
            " AND y.sid = g.sid)"
            for table in ("samples", "samples_10m")
        )
        + ")"
    )


# One row per series and chart cell (?3 seconds from ?4, ?5 cells; a row before the first cell
# falls in it, one past the last in the last): each figure's count, sum, largest value, the times
# of its oldest and newest rows and their values. SQLite groups the window's rows by sorting them
# (its sorter spills to a temporary file past the page cache), so what reaches Python is a row a
# cell, never a row a sample.
_CHART = (
    "WITH x AS ("
    + " UNION ALL ".join(
        _WINDOW.format(table=table, a=_NUM.format(c="a"), b=_NUM.format(c="b"))
        for table in ("samples_10m", "samples")
    )
    + "), g AS (SELECT sid, max(0, min(?5 - 1, CAST((t - ?4) / ?3 AS INTEGER))) AS k,"
    + ",".join(
        f" count({c}) AS n{c}, sum({c}) AS s{c}, max({c}) AS m{c},"
        f" min(CASE WHEN {c} IS NOT NULL THEN t END) AS f{c}, max(CASE WHEN {c} IS NOT NULL THEN t END) AS l{c}"
        for c in "ab"
    )
    + " FROM x GROUP BY sid, k) SELECT sid, k,"
    + ",".join(f" n{c}, s{c}, m{c}, f{c}, {_at(c, 'f' + c)}, l{c}, {_at(c, 'l' + c)}" for c in "ab")
    + " FROM g ORDER BY sid, k"
)


def history_path() -> Path:
    """`$XDG_STATE_HOME/fleetdeck/history.sqlite3`."""
    return statedir.state_dir() / "history.sqlite3"


#: the longest text written, in characters (a path is at most 4096 bytes on Linux)
TEXT_MAX = 4096
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    o = ord(m.group())
    return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else "\\x00" if o == 0 else f"\\u{o:04x}"


def sql_text(v: Any) -> str:
    """Any host string as text SQLite stores and compares whole: valid UTF-8 (a byte that was
    not UTF-8, kept as a surrogate by surrogateescape, becomes `\\xNN`; another lone surrogate
    `\\uDXXX`), no NUL (`\\x00`: SQLite's string functions stop at it), at most `TEXT_MAX`
    characters (a longer one keeps its head and a hash of the whole, so two stay two).
    Ordinary text is unchanged, so a path reads back as the poll reported it."""
    s = "" if v is None else v if isinstance(v, str) else str(v)
    s = _UNSAFE.sub(_escape, s)
    if len(s) > TEXT_MAX:
        s = s[: TEXT_MAX - 17] + "..." + hashlib.sha256(s.encode()).hexdigest()[:14]
    return s


def sql_number(v: Any) -> float | None:
    """Any host number as a REAL SQLite can hold: a finite float, else None (NULL). An integer
    past a float's range (10**400), NaN, infinities, booleans and non-numbers are NULL; a large
    integer within range (2**70) is its float."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _when(*times: Any) -> int:
    """The first of `times` that is an epoch second above 0 and below 2**53, as an int; else 0
    (the times are the controller's, so 0 is a test's clock, not a host's lie)."""
    for v in times:
        f = sql_number(v)
        if f is not None and 0 < f < 2**53:
            return int(f)
    return 0


def _since(v: Any) -> int:
    """A read's lower time bound as an int SQLite can bind: clamped to 0..2**53 (NaN: 0)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v <= 0:
        return 0
    return 2**53 if v >= 2**53 else int(v)


class History:
    """The history database; every method answers (empty when the database cannot be used)."""

    def __init__(
        self,
        path: Path | str | None = None,
        raw_hours: float = 24.0,
        retention_days: float = 14.0,
        busy_ms: int = 250,
    ) -> None:
        self.path = Path(path) if path is not None else history_path()
        self.raw_hours = raw_hours
        self.retention_days = retention_days
        self.busy_ms = busy_ms
        self.warnings: list[str] = []
        #: what the last warning was about, in SQLite's or the system's words
        self.error: str | None = None
        self._db: sqlite3.Connection | None = None
        self._ids: dict[tuple[str, str, str], int] = {}
        self._pending: dict[tuple[int, int], list[Any]] = {}
        self._bucket: int | None = None
        self._failed_at: float | None = None
        self._maintained_at = 0.0

    # -- the connection ------------------------------------------------------------------------
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

    def close(self) -> None:
        """Write what is folded so far and close the database (reopened on the next use)."""
        if self._db is not None and self._pending:
            self.flush()
        self._drop()

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

    # -- writing -----------------------------------------------------------------------------
    def record(self, snap: FleetSnapshot) -> bool:
        """Fold one poll into the minute's rows; the minute is written when the next one starts.
        False (and a warning) when a write was due and could not be made."""
        db = self._conn()
        if db is None:
            return False
        try:
            for h in snap.hosts:
                t = _when(h.time, snap.time)
                self._add(db, t, h.name, "host", "", int(h.reachable), h.latency_ms)
                if not h.reachable:
                    continue
                for g in h.gpus:
                    used, card = sql_number(g.memory_used_mib), f"{g.index}:{g.uuid}"
                    self._add(
                        db,
                        t,
                        h.name,
                        "gpu",
                        card,
                        None if used is None else round(used),
                        g.utilization_pct,
                    )
                    if (
                        g.temperature_c is not None or g.power_w is not None
                    ):  # a card that says neither: no row
                        self._add(db, t, h.name, "gpuh", card, g.temperature_c, g.power_w)
                for d in h.disks:
                    if not d.error and d.total_bytes:
                        self._add(db, t, h.name, "disk", d.path, d.used_bytes, d.free_bytes)
                for r in h.runs:
                    if r.state in ("running", "stalled"):
                        self._add(db, t, h.name, "run", r.path, r.step, r.loss)
                        if r.eval_losses:
                            self._add(db, t, h.name, "eval", r.path, *r.eval_losses[-1][:2])
                for s in h.seats or ():
                    self._add(
                        db,
                        t,
                        h.name,
                        "seat",
                        s.key,
                        s.restarts,
                        sum(x for x in map(sql_number, s.memory_by_gpu.values()) if x is not None),
                    )
        except (sqlite3.Error, OSError) as e:
            self._fail("a poll could not be recorded", e)
            return False
        now = _when(snap.time)
        bucket = now // BUCKET * BUCKET
        ok = True
        if self._bucket is None or bucket > self._bucket:
            ended = self._bucket is not None
            self._bucket = bucket
            if ended:
                ok = self.flush()
        if ok and now - self._maintained_at >= MAINTAIN_EVERY:
            self.maintain(now)
        return ok

    def _add(
        self,
        db: sqlite3.Connection,
        t: int,
        host: str,
        kind: str,
        name: str,
        a: float | None,
        b: float | None,
    ) -> None:
        # the one place a host's values enter a row: each through its sink rule
        sid = self._sid(db, sql_text(host), kind, sql_text(name))
        a, b = sql_number(a), sql_number(b)
        key = (t // BUCKET * BUCKET, sid)
        # [kind, a, b, polls with a, polls with b]; a mean is kept as a sum until written
        cur = self._pending.get(key)
        if cur is None:
            self._pending[key] = [kind, a, b, int(a is not None), int(b is not None)]
            return
        for i, v in ((1, a), (2, b)):
            if v is not None:
                cur[i], cur[i + 2] = fold_in(cur[i], v, fold_of(kind, i - 1)), cur[i + 2] + 1

    @staticmethod
    def _value(v: list[Any], i: int) -> float | None:
        how = fold_of(v[0], i - 1)
        out = fold_out(v[i], v[i + 2], how)
        return None if out is None else sql_number(round(out, 6) if how == "mean" else out)

    def flush(self) -> bool:
        """Write the folded rows now (the minute in progress too: its row is replaced when the
        minute ends). False, with a warning, when they could not be written; they are kept for
        the next try, up to an hour of them."""
        db = self._conn()
        if db is None or not self._pending:
            return db is not None
        rows = [
            (t, sid, self._value(v, 1), self._value(v, 2)) for (t, sid), v in self._pending.items()
        ]
        try:
            db.execute("BEGIN")
            db.executemany("INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except (sqlite3.Error, OSError) as e:
            self._rollback(db)
            self._fail("a poll could not be written", e)
            if len(self._pending) > 200_000:
                self._pending.clear()
            return False
        current = self._bucket
        self._pending = {
            k: v for k, v in self._pending.items() if current is not None and k[0] >= current
        }
        return True

    def event(self, t: float, host: str, kind: str, subject: str, text: str) -> bool:
        """Record one event (a seat check, an alert transition)."""
        db = self._conn()
        if db is None:
            return False
        try:
            db.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                (_when(t), *map(sql_text, (host, kind, subject, text))),
            )
        except (sqlite3.Error, OSError) as e:
            self._fail("an event could not be written", e)
            return False
        return True

    def maintain(self, now: float | None = None) -> None:
        """Fold minute rows older than `raw_hours` into ten-minute rows, each figure as a minute
        folds its polls (`FIGURES`); drop what is past the retention."""
        db = self._conn()
        if db is None:
            return
        now = time.time() if now is None else now
        # through `_when`: a retention of 1e308 days (finite, and allowed) is "keep everything"
        raw_cut = _when(now - self.raw_hours * 3600) // FOLD * FOLD
        old_cut = _when(now - self.retention_days * 86400)
        try:
            db.execute("BEGIN")
            db.execute(_FOLD_10M, (FOLD, raw_cut))
            db.execute("DELETE FROM samples WHERE t < ?", (raw_cut,))
            db.execute("DELETE FROM samples_10m WHERE t < ?", (old_cut,))
            db.execute("DELETE FROM events WHERE t < ?", (old_cut,))
            gone = self._unused_series(db)
            db.executemany("DELETE FROM series WHERE id = ?", [(i,) for i in gone])
            db.execute("INSERT OR REPLACE INTO meta VALUES ('maintained_at', ?)", (now,))
            db.execute("COMMIT")
            # a series seen again (a host back, a run resumed) gets a new row when it is written
            self._ids = {k: i for k, i in self._ids.items() if i not in gone}
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._maintained_at = now
            # a minute already folded is not written again as a minute
            self._pending = {k: v for k, v in self._pending.items() if k[0] >= raw_cut}
        except (sqlite3.Error, OSError) as e:
            self._rollback(db)
            self._fail("downsampling failed", e)

    def _unused_series(self, db: sqlite3.Connection) -> set[int]:
        # a series whose rows all passed the retention (a run started weeks ago, a host gone):
        # without this the table grows with every run a fleet ever started
        used = {
            sid
            for (sid,) in db.execute(
                "SELECT DISTINCT sid FROM samples UNION SELECT DISTINCT sid FROM samples_10m"
            )
        }
        used.update(sid for _t, sid in self._pending)
        return {i for (i,) in db.execute("SELECT id FROM series")} - used

    @staticmethod
    def _rollback(db: sqlite3.Connection) -> None:
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    # -- reading -------------------------------------------------------------------------------
    def series(
        self, host: str, kind: str, since: float
    ) -> dict[str, list[tuple[int, float | None, float | None]]]:
        """{series name: [(t, a, b)...]} of one host and kind since `since`, oldest first,
        ten-minute and minute rows together (the minute in progress included)."""
        db = self._conn()
        if db is None:
            return {}
        self.flush()
        try:
            rows = db.execute(
                "SELECT s.name, x.t, x.a, x.b FROM series s JOIN ("
                " SELECT sid, t, a, b FROM samples_10m WHERE t >= ?1 UNION ALL"
                " SELECT sid, t, a, b FROM samples WHERE t >= ?1) x ON x.sid = s.id"
                " WHERE s.host = ?2 AND s.kind = ?3 ORDER BY s.name, x.t",
                (_since(since), host, kind),
            ).fetchall()
        except (sqlite3.Error, OSError) as e:
            self._fail("cannot be read", e)
            return {}
        out: dict[str, list[tuple[int, float | None, float | None]]] = {}
        for name, t, a, b in rows:
            out.setdefault(name, []).append((t, a, b))
        return out

    def names(self, host: str) -> dict[str, list[str]]:
        """{kind: [series name...]} of `host`, names sorted; {} (and a warning) when the database
        cannot be opened or read."""
        db = self._conn()
        if db is None:
            return {}
        try:
            rows = db.execute(
                "SELECT kind, name FROM series WHERE host = ? ORDER BY kind, name", (host,)
            ).fetchall()
        except (sqlite3.Error, OSError) as e:
            self._fail("cannot be read", e)
            return {}
        out: dict[str, list[str]] = {}
        for kind, name in rows:
            out.setdefault(kind, []).append(name)
        return out

    def chart(
        self, host: str, since: float, step: int, width: int
    ) -> dict[str, dict[str, tuple[Line | None, Line | None]]]:
        """{kind: {series name: (figure a, figure b)}} of `host` since `since`, as `width` cells of
        `step` seconds from `since` (the minute in progress included): each cell folds its rows by
        the figure's kind (`history_figures.cell`), and each figure's first, last and peak are the
        window's own, both worked out by SQLite (`_CHART`), so what is held here is `width` values
        a figure, however many rows the window has. A figure no row holds is None; a series with
        no row in the window is left out."""
        db = self._conn()
        if db is None:
            return {}
        self.flush()
        width, step = max(1, int(width)), max(1, int(step))
        lo = _since(since)
        origin = (
            float(since)
            if isinstance(since, (int, float)) and math.isfinite(since) and since >= lo
            else float(lo)
        )
        out: dict[str, dict[str, tuple[Line | None, Line | None]]] = {}
        try:
            named = {
                sid: (kind, name)
                for sid, kind, name in db.execute(
                    "SELECT id, kind, name FROM series WHERE host = ?", (host,)
                )
            }
            for sid, cells in itertools.groupby(
                db.execute(_CHART, (lo, host, step, origin, width)), key=itemgetter(0)
            ):
                kind, name = named.get(sid, ("", ""))
                lines = self._lines(kind, list(cells), width)
                if lines != (None, None) and kind:
                    out.setdefault(kind, {})[name] = lines
        except (sqlite3.Error, OSError) as e:
            self._fail("cannot be read", e)
            return {}
        return {kind: dict(sorted(v.items())) for kind, v in out.items()}

    @staticmethod
    def _lines(kind: str, rows: list[tuple], width: int) -> tuple[Line | None, Line | None]:
        """The two `Line`s of one series from its `_CHART` rows (one a cell, oldest first)."""
        lines: list[Line | None] = []
        for i in (0, 1):
            how = fold_of(kind, i)
            cells: list[float | None] = [None] * width
            first = last = None
            peak: float | None = None
            n_rows = 0
            for r in rows:
                n, total, top, first_t, oldest, last_t, newest = r[2 + 7 * i : 9 + 7 * i]
                if not n:
                    continue
                cells[r[1]] = cell(how, n, total, top, newest)
                if first is None:
                    first = (first_t, oldest)
                last = (last_t, newest)
                peak = top if peak is None or top > peak else peak
                n_rows += n
            if (
                first is not None
                and last is not None
                and peak is not None
                and None not in (first[1], last[1])
            ):
                lines.append(
                    Line(
                        cells=cells,
                        first=first[1],
                        first_t=first[0],
                        last=last[1],
                        last_t=last[0],
                        peak=peak,
                        rows=n_rows,
                    )
                )
            else:
                lines.append(None)
        return lines[0], lines[1]

    def stream(
        self, host: str, kind: str, since: float, chunk: int = 4096
    ) -> Iterator[tuple[str, list[tuple[int, float | None, float | None]]]]:
        """Every row of one host and kind since `since` as `(series name, [(t, a, b)...])` chunks of
        at most `chunk` rows: the series in name order, each series' rows oldest first (one series
        may span several chunks, one after the other). What is held is one chunk; SQLite sorts the
        window's rows in its sorter, which spills to a temporary file past the page cache. A
        database that cannot be read ends the rows early, with a warning."""
        db = self._conn()
        if db is None:
            return
        self.flush()
        try:
            ids = db.execute(
                "SELECT id, name FROM series WHERE host = ? AND kind = ? ORDER BY name",
                (host, kind),
            ).fetchall()
            if not ids:
                return
            name_of = {int(sid): name for sid, name in ids}
            # the sids are this database's own integers, so the rank is written into the query
            rank = (
                "CASE sid"
                + "".join(f" WHEN {int(sid)} THEN {k}" for k, (sid, _) in enumerate(ids))
                + " END"
            )
            q = (
                "SELECT sid, t, a, b FROM ("
                + " UNION ALL ".join(
                    f"SELECT sid, t, {_NUM.format(c='a')} AS a, {_NUM.format(c='b')} AS b FROM {table} WHERE t >= ?1"
                    f" AND sid IN ({','.join(str(s) for s in name_of)})"
                    for table in ("samples_10m", "samples")
                )
                + f") ORDER BY {rank}, t"
            )
            cur = db.execute(q, (_since(since),))
            while True:
                rows = cur.fetchmany(chunk)
                if not rows:
                    return
                for sid, pts in itertools.groupby(rows, key=itemgetter(0)):
                    yield name_of[sid], [p[1:] for p in pts]
        except (sqlite3.Error, OSError) as e:
            self._fail("cannot be read", e)

    def gpu_memory(self, host: str, since: float) -> dict[int, list[float]]:
        """Used MiB per GPU index since `since` (the dashboard's sparklines)."""
        return {
            int(name.partition(":")[0]): [a for _, a, _ in pts if a is not None]
            for name, pts in self.series(host, "gpu", since).items()
        }

    def last_up(self, host: str) -> float | None:
        """The last time `host` answered a poll, or None."""
        pts = self.series(host, "host", 0).get("", [])
        ups = [t for t, a, _ in pts if a and a >= 0.5]
        return float(ups[-1]) if ups else None

    def events(self, since: float = 0, kind: str | None = None) -> list[dict[str, Any]]:
        """Events since `since`, oldest first."""
        db = self._conn()
        if db is None:
            return []
        try:
            q = "SELECT t, host, kind, subject, text FROM events WHERE t >= ?"
            args: tuple = (_since(since),)
            if kind:
                q, args = q + " AND kind = ?", (*args, kind)
            rows = db.execute(q + " ORDER BY t", args).fetchall()
        except (sqlite3.Error, OSError) as e:
            self._fail("cannot be read", e)
            return []
        return [dict(zip(("t", "host", "kind", "subject", "text"), r, strict=True)) for r in rows]

    def size_bytes(self) -> int:
        """The database's size on disk, WAL included."""
        return sum(
            os.path.getsize(p) for p in (self.path, Path(f"{self.path}-wal")) if os.path.exists(p)
        )


__all__ = ["History", "history_path", "sql_number", "sql_text"]
