"""The Fleet table's cells made again only when what they show from changed (`HostCells`).

A poll brings new snapshot objects for every host, most of them equal to the ones before but for
the time and the latency; the clock's tick moves only the ages. Each of a row's costly cells
(status, GPUs, disks, live runs) is kept with the inputs it was made from, compared by value:
the snapshot records it reads (frozen dataclasses, equal when every field is), the sparkline
characters as shown, the ages as the words shown, the column's width and whether the host is
greyed. The cheap cells (host, latency, stray) are made each time: the table keeps the object of
a cell equal to the one shown (`LazyRows._fill`), so an equal cell is not drawn again.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from fleetdeck.backend.host.lib.units import duration_short
from fleetdeck.show.cells import folded
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.rows import fleet as rows


class HostCells:
    """One Fleet view's rows: `cells(state, name, w)` is `rows.host_cells(...)[0]`, each costly
    cell the very object made before while its inputs are equal to those it was made from."""

    def __init__(self) -> None:
        #: (host, column) -> (the inputs the cell was made from, the cell)
        self._made: dict[tuple[str, str], tuple[Any, Text]] = {}

    def _cell(self, name: str, column: str, inputs: Any, make: Any) -> Text:
        hit = self._made.get((name, column))
        if hit is not None and hit[0] == inputs:
            return hit[1]
        cell = make()
        self._made[(name, column)] = (inputs, cell)
        return cell

    def cells(self, state: FleetState, name: str, w: dict[str, int]) -> tuple[Text | None, ...]:
        """Host `name`'s cells for the columns in `w` (in `rows.COLUMNS` order)."""
        live = state.hosts.get(name)
        snap = state.shown(name)
        down = live is not None and not live.reachable
        dim = down
        # what `rows.status_text` reads, as it shows it
        since = state.down_since.get(name) if down else None
        stale = state.is_stale(name) and not down
        under = "disks" not in w and snap is not None and not down and snap.disks
        status_in = (
            live is None,
            down,
            (live.error_code, live.error) if down and live is not None else None,
            None if since is None else duration_short(state.clock() - since),
            name in state.last_good,
            duration_short(state.age(name)) if stale else None,
            (snap.disks, w["status"]) if under and snap is not None else None,
        )
        out: dict[str, Text | None] = {
            "host": Text(folded(name, w["host"]), style="dim" if dim else "bold"),
            "status": self._cell(
                name, "status", status_in, lambda: rows.status_text(state, name, w)
            ),
        }
        if "lat" in w:
            ms = state.latency_ms(name)
            out["lat"] = Text("-" if not live or ms is None or down else rows.latency_text(ms))
        gpus = snap.gpus if snap is not None else None
        sparks = (
            tuple("".join(state.spark.get((snap.name, g.index), ())) for g in snap.gpus)
            if snap is not None
            else None
        )
        out["gpus"] = self._cell(
            name,
            "gpus",
            (gpus, sparks, w["gpus"], dim),
            lambda: rows.gpu_lines(state, snap, w["gpus"], dim)[0],
        )
        if "disks" in w:
            out["disks"] = self._cell(
                name,
                "disks",
                (snap.disks if snap is not None else None, w["disks"], dim),
                lambda: rows.disk_lines(snap, w["disks"], dim)[0],
            )
        out["runs"] = self._cell(
            name,
            "runs",
            (snap.runs if snap is not None else None, w["runs"], dim),
            lambda: rows.run_lines(snap, w["runs"], dim)[0],
        )
        out["stray"] = rows.stray_text(snap, down)
        return tuple(out[k] for k in rows.COLUMNS if k in w)
