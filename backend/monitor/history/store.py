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
are one GROUP BY in SQLite (`chart`, `history_query._CHART`), and `--json`'s rows come a chunk
at a time (`stream`), so `fleetdeck history --since 2w` over 3 M rows stays at about 56 MiB
(`benchmarks/history_big.py`). `series` (every row, in lists) is for short windows: the alert
rules' disk rate and the dashboard's last hour.

What a host says reaches the database through two rules, one for text (`sql_text`) and one for
numbers (`sql_number`), applied to every value written (`values.py`). The connection and
its failures are `db.py`'s; the queries that read a window, `query.py`'s.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.monitor.history.db import HistoryDB
from fleetdeck.backend.monitor.history.figures import FIGURES, Line, fold_in, fold_of, fold_out
from fleetdeck.backend.monitor.history.query import (
    Rows,
    chart_lines,
    event_rows,
    series_names,
    series_rows,
    stream_rows,
)
from fleetdeck.backend.monitor.history.values import row_time, sql_number, sql_text

MAINTAIN_EVERY = 3600.0
BUCKET = 60
FOLD = 600
_T = TypeVar("_T")


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


def history_path() -> Path:
    """`$XDG_STATE_HOME/fleetdeck/history.sqlite3`."""
    return statedir.state_dir() / "history.sqlite3"


class History(HistoryDB):
    """The history database; every method answers (empty when the database cannot be used)."""

    def __init__(
        self,
        path: Path | str | None = None,
        raw_hours: float = 24.0,
        retention_days: float = 14.0,
        busy_ms: int = 250,
    ) -> None:
        super().__init__(Path(path) if path is not None else history_path(), busy_ms)
        self.raw_hours = raw_hours
        self.retention_days = retention_days
        self._pending: dict[tuple[int, int], list[Any]] = {}
        self._bucket: int | None = None

    def close(self) -> None:
        """Write what is folded so far and close the database (reopened on the next use)."""
        if self._db is not None and self._pending:
            self.flush()
        self._drop()

    # -- writing -----------------------------------------------------------------------------
    def record(self, snap: FleetSnapshot) -> bool:
        """Fold one poll into the minute's rows; the minute is written when the next one starts.
        False (and a warning) when a write was due and could not be made."""
        db = self._conn()
        if db is None:
            return False
        try:
            for h in snap.hosts:
                t = row_time(h.time, snap.time)
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
        now = row_time(snap.time)
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
                (row_time(t), *map(sql_text, (host, kind, subject, text))),
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
        raw_cut = row_time(now - self.raw_hours * 3600) // FOLD * FOLD
        old_cut = row_time(now - self.retention_days * 86400)
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

    # -- reading -------------------------------------------------------------------------------
    def _read(self, query: Callable[..., _T], *args: Any, empty: _T, flush: bool = True) -> _T:
        """`query(db, *args)`, the minute in progress written first (`flush`); `empty` (and a
        warning) when the database cannot be opened or read."""
        db = self._conn()
        if db is None:
            return empty
        if flush:
            self.flush()
        try:
            return query(db, *args)
        except (sqlite3.Error, OSError) as e:
            self._fail("cannot be read", e)
            return empty

    def series(self, host: str, kind: str, since: float) -> Rows:
        """{series name: [(t, a, b)...]} of one host and kind since `since`, oldest first,
        ten-minute and minute rows together (the minute in progress included)."""
        return self._read(series_rows, host, kind, since, empty={})

    def names(self, host: str) -> dict[str, list[str]]:
        """{kind: [series name...]} of `host`, names sorted; {} (and a warning) when the database
        cannot be opened or read."""
        return self._read(series_names, host, empty={}, flush=False)

    def chart(
        self, host: str, since: float, step: int, width: int
    ) -> dict[str, dict[str, tuple[Line | None, Line | None]]]:
        """{kind: {series name: (figure a, figure b)}} of `host` since `since`, as `width` cells of
        `step` seconds from `since` (the minute in progress included): each cell folds its rows by
        the figure's kind (`history_figures.cell`), and each figure's first, last and peak are the
        window's own, both worked out by SQLite (`history_query._CHART`), so what is held here is
        `width` values a figure, however many rows the window has. A figure no row holds is None;
        a series with no row in the window is left out."""
        return self._read(chart_lines, host, since, step, width, empty={})

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
            yield from stream_rows(db, host, kind, since, chunk)
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
        return self._read(event_rows, since, kind, empty=[], flush=False)


__all__ = ["History", "history_path"]
