"""The outbox on disk: an append-only journal of one JSON record a line, so that queuing a
transition, a delivery and a retry each cost one short append, whatever the outbox holds.

Records (`$XDG_STATE_HOME/fleetdeck/outbox.jsonl`):

- `{"op": "add", "seq": N, "id", "sink", "alert", "created", "attempts", "next_at"}`: an entry
  queued, numbered in order;
- `{"op": "done", "id", "sink"}`: delivered, or given up;
- `{"op": "try", "id", "sink", "attempts", "next_at"}`: an attempt failed, retried at `next_at`
  (or a silence holds it until `next_at`, its end).

One delivery may carry several entries of one sink (`grouping.py`): its outcome is one write of
one record per entry (`Journal.record`), so the journal stays exactly-once per transition id.

**With the alert state, atomically.** The cycle that judges a transition appends its `add`
records first, then writes `alerts.json` naming the last sequence number it covers
(`outbox_seq`). At the next start an `add` past that number belongs to a cycle whose state was
never saved and is dropped with it: a transition is judged and queued, or neither.

**Compaction.** When the journal holds more than `COMPACT_FACTOR` records for each live entry
(and at least `COMPACT_MIN`), it is rewritten with one `add` record per live entry, into a new
file renamed over the old one; the rewrites cost at most a fixed share of the appends that
made them necessary. Loading is strict per record: a malformed line, a non-finite time or count,
is quarantined (`alert_state`), and a journal past `JOURNAL_LIMIT` is moved aside whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.alert_state import (
    Bad,
    Reject,
    count,
    finite,
    move_aside,
    table,
    text,
)
from fleetdeck.backend.monitor.delivery.outbox_entry import Pending, pending_from_json

#: a journal larger than this is not read: it is moved aside whole (an entry is about 400 bytes)
JOURNAL_LIMIT = 64 * 2**20
#: a line longer than this is malformed (a record is a few hundred bytes)
LINE_LIMIT = 2**20
COMPACT_MIN = 256
COMPACT_FACTOR = 4


def outbox_path() -> Path:
    """Where `watch` keeps the outbox journal."""
    return statedir.state_dir() / "outbox.jsonl"


def _key(d: dict[str, Any]) -> tuple[str, str]:
    return (text(d.get("id"), "id"), text(d.get("sink"), "sink"))


class Journal:
    """The outbox journal of one state folder (see the module docstring). Writing never raises:
    a record that cannot be written is kept and written with the next one, `error` says why,
    and `warn` hears it once per failure."""

    def __init__(self, path: Path | None = None, warn: Callable[[str], None] | None = None) -> None:
        self.path = path or outbox_path()
        self.warn = warn or (lambda _w: None)
        #: the last sequence number given to an `add`
        self.seq = 0
        #: records in the file now
        self.records = 0
        #: bytes this journal has written (appends and compactions)
        self.bytes_written = 0
        self.error: str | None = None
        self._backlog: list[bytes] = []
        self._fd: int | None = None

    # -- reading --------------------------------------------------------------------------------
    def load(
        self, committed: int | None, *, move: bool = True
    ) -> tuple[list[Pending], list[Reject], list[str]]:
        """The live entries in queue order, the records that did not load, and warnings. `committed`
        is the `outbox_seq` the alert state was saved with (None when there is no saved state: then
        every `add` counts). A file past JOURNAL_LIMIT is moved aside whole when `move`."""
        entries: dict[tuple[str, str], Pending] = {}
        rejects: list[Reject] = []
        warnings: list[str] = []
        dropped = 0
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return [], [], []
        except OSError as e:
            return [], [], [f"outbox {shown(str(self.path))} could not be read ({e.strerror or e})"]
        if size > JOURNAL_LIMIT:
            why = f"it is {size} bytes, past the {JOURNAL_LIMIT}-byte limit"
            if not move:
                return [], [], [f"outbox {shown(str(self.path))} is not used: {why}"]
            try:
                dest = move_aside(self.path)
            except OSError as e:
                return (
                    [],
                    [],
                    [
                        f"outbox {shown(str(self.path))} is not used ({why}) and could not be moved "
                        f"aside ({e.strerror or e})"
                    ],
                )
            return (
                [],
                [],
                [
                    f"outbox {shown(str(self.path))} was quarantined ({why}): moved to "
                    f"{shown(str(dest))}; what it held is not delivered"
                ],
            )
        n = 0
        try:
            with open(self.path, "rb") as f:
                while raw := f.readline(LINE_LIMIT + 1):
                    n += 1
                    where = f"{self.path.name} line {n}"
                    if len(raw) > LINE_LIMIT:
                        rejects.append(
                            Reject(
                                where,
                                f"longer than {LINE_LIMIT} bytes",
                                raw[:200].decode("latin-1"),
                            )
                        )
                        while raw and not raw.endswith(b"\n"):  # the rest of that line
                            raw = f.readline(LINE_LIMIT + 1)
                        continue
                    if not raw.strip():
                        continue
                    try:
                        rec = table(json.loads(raw.decode("utf-8")), "the record")
                        op = rec.get("op")
                        if op == "add":
                            p = pending_from_json(rec)
                            self.seq = max(self.seq, p.seq)
                            if committed is not None and p.seq > committed:
                                dropped += 1  # queued by a cycle whose state was never saved
                                continue
                            entries[p.key] = p
                        elif op == "done":
                            entries.pop(_key(rec), None)
                        elif op == "try":
                            k = _key(rec)
                            attempts = count(rec.get("attempts"), "attempts")
                            next_at = finite(rec.get("next_at"), "next_at")
                            if k in entries:
                                entries[k].attempts, entries[k].next_at = attempts, next_at
                        else:
                            raise Bad(f"op is {op!r:.40}, not add, done or try")
                    except (Bad, ValueError, RecursionError) as e:
                        rejects.append(
                            Reject(where, str(e)[:200], raw.decode("utf-8", "replace").rstrip("\n"))
                        )
                        continue
                    self.records += 1
        except OSError as e:
            warnings.append(
                f"outbox {shown(str(self.path))} could not be read whole ({e.strerror or e})"
            )
        live = list(entries.values())
        if (rejects or dropped) and move:
            self.compact(live)  # what was dropped or quarantined is gone from the file too
        return live, rejects, warnings

    # -- writing ----------------------------------------------------------------------------------
    def add(self, entries: Iterable[Pending]) -> None:
        """Journal newly queued entries (each gets the next sequence number)."""
        for p in entries:
            self.seq += 1
            p.seq = self.seq
            self._append({"op": "add", "seq": p.seq, **p.to_json()})
        self.flush()

    def done(self, p: Pending) -> None:
        """`p` was delivered or given up."""
        self._append({"op": "done", "id": p.id, "sink": p.sink})
        self.flush()

    def tried(self, p: Pending) -> None:
        """An attempt of `p` failed; it is retried at `p.next_at`."""
        self.record([], [p])

    def record(self, done: Iterable[Pending], tried: Iterable[Pending]) -> None:
        """One attempt's outcome in one write: `done` delivered or given up, `tried` due again at
        their `next_at` (a failed attempt, or held by a silence until it ends). A group's entries
        are written together, so a crash leaves every one of them done or none (a write torn by
        a power cut is a malformed last line: those entries stay queued, sent again, same ids)."""
        for p in done:
            self._append({"op": "done", "id": p.id, "sink": p.sink})
        for p in tried:
            self._append(
                {
                    "op": "try",
                    "id": p.id,
                    "sink": p.sink,
                    "attempts": p.attempts,
                    "next_at": p.next_at,
                }
            )
        self.flush()

    def _append(self, rec: dict[str, Any]) -> None:
        # ensure_ascii keeps a host's undecodable bytes (lone surrogates) through the file
        self._backlog.append((json.dumps(rec, ensure_ascii=True) + "\n").encode("ascii"))

    def flush(self) -> bool:
        """Write what is waiting; False (with `error` set) when it could not be."""
        if not self._backlog:
            return True
        data = b"".join(self._backlog)
        try:
            fd = self._open()
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.write(fd, view[done:])
        except OSError as e:
            self._close()
            msg = f"outbox {shown(str(self.path))} not written ({e.strerror or e}); deliveries go on from memory"
            if msg != self.error:
                self.warn(msg)
            self.error = msg
            return False
        self.bytes_written += len(data)
        self.records += len(self._backlog)
        self._backlog.clear()
        self.error = None
        return True

    @property
    def saved(self) -> bool:
        """Everything handed to the journal is in the file."""
        return not self._backlog

    def wants_compaction(self, live: int) -> bool:
        return self.records > max(COMPACT_MIN, COMPACT_FACTOR * live)

    def compact(self, live: Iterable[Pending]) -> bool:
        """Rewrite the journal with one `add` record per live entry (in queue order, numbers kept)."""
        lines = [
            (
                json.dumps({"op": "add", "seq": p.seq, **p.to_json()}, ensure_ascii=True) + "\n"
            ).encode("ascii")
            for p in live
        ]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(b"".join(lines))
            os.replace(tmp, self.path)
        except OSError as e:
            self.warn(f"outbox {shown(str(self.path))} not compacted ({e.strerror or e})")
            return False
        self._close()
        self._backlog.clear()
        self.records = len(lines)
        self.bytes_written += sum(map(len, lines))
        return True

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size:
                    with open(self.path, "rb") as f:
                        f.seek(size - 1)
                        if f.read(1) != b"\n":
                            os.write(
                                fd, b"\n"
                            )  # a crash left a torn line: never glue a record onto it
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def close(self) -> None:
        self.flush()
        self._close()


__all__ = [
    "COMPACT_FACTOR",
    "COMPACT_MIN",
    "JOURNAL_LIMIT",
    "Journal",
    "Pending",
    "outbox_path",
    "pending_from_json",
]
