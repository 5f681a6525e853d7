"""Reading the history database without holding a window's rows: the queries behind
`History.series`, `chart`, `stream`, `names` and `events`, each given an open connection.

The chart's cells and each figure's first, last and peak are one GROUP BY in SQLite
(`chart_lines`, `_CHART`), and `--json`'s rows come a chunk at a time (`stream_rows`), so what
reaches Python is a row a cell or a chunk, never a row a sample.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from fleetdeck.backend.monitor.history.figures import Line, cell, fold_of
from fleetdeck.backend.monitor.history.values import read_since

Rows = dict[str, list[tuple[int, float | None, float | None]]]

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


def series_rows(db: sqlite3.Connection, host: str, kind: str, since: float) -> Rows:
    """{series name: [(t, a, b)...]} of one host and kind since `since`, oldest first,
    ten-minute and minute rows together."""
    rows = db.execute(
        "SELECT s.name, x.t, x.a, x.b FROM series s JOIN ("
        " SELECT sid, t, a, b FROM samples_10m WHERE t >= ?1 UNION ALL"
        " SELECT sid, t, a, b FROM samples WHERE t >= ?1) x ON x.sid = s.id"
        " WHERE s.host = ?2 AND s.kind = ?3 ORDER BY s.name, x.t",
        (read_since(since), host, kind),
    ).fetchall()
    out: Rows = {}
    for name, t, a, b in rows:
        out.setdefault(name, []).append((t, a, b))
    return out


def series_names(db: sqlite3.Connection, host: str) -> dict[str, list[str]]:
    """{kind: [series name...]} of `host`, names sorted."""
    rows = db.execute(
        "SELECT kind, name FROM series WHERE host = ? ORDER BY kind, name", (host,)
    ).fetchall()
    out: dict[str, list[str]] = {}
    for kind, name in rows:
        out.setdefault(kind, []).append(name)
    return out


def chart_lines(
    db: sqlite3.Connection, host: str, since: float, step: int, width: int
) -> dict[str, dict[str, tuple[Line | None, Line | None]]]:
    """`History.chart`'s answer, worked out by SQLite (`_CHART`)."""
    width, step = max(1, int(width)), max(1, int(step))
    lo = read_since(since)
    origin = (
        float(since)
        if isinstance(since, (int, float)) and math.isfinite(since) and since >= lo
        else float(lo)
    )
    out: dict[str, dict[str, tuple[Line | None, Line | None]]] = {}
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
        lines = _lines(kind, list(cells), width)
        if lines != (None, None) and kind:
            out.setdefault(kind, {})[name] = lines
    return {kind: dict(sorted(v.items())) for kind, v in out.items()}


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


def stream_rows(
    db: sqlite3.Connection, host: str, kind: str, since: float, chunk: int
) -> Iterator[tuple[str, list[tuple[int, float | None, float | None]]]]:
    """`History.stream`'s chunks: the series in name order, each series' rows oldest first."""
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
    cur = db.execute(q, (read_since(since),))
    while True:
        rows = cur.fetchmany(chunk)
        if not rows:
            return
        for sid, pts in itertools.groupby(rows, key=itemgetter(0)):
            yield name_of[sid], [p[1:] for p in pts]


def event_rows(db: sqlite3.Connection, since: float, kind: str | None) -> list[dict[str, Any]]:
    """Events since `since`, oldest first."""
    q = "SELECT t, host, kind, subject, text FROM events WHERE t >= ?"
    args: tuple = (read_since(since),)
    if kind:
        q, args = q + " AND kind = ?", (*args, kind)
    rows = db.execute(q + " ORDER BY t", args).fetchall()
    return [dict(zip(("t", "host", "kind", "subject", "text"), r, strict=True)) for r in rows]


__all__ = ["Rows", "chart_lines", "event_rows", "series_names", "series_rows", "stream_rows"]
