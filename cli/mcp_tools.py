"""The tools `fleetdeck mcp` offers: each answers the JSON of the CLI command it names, built by the
same functions the command uses, as one text block serialized the way the command prints it
(`json.dumps`: ASCII, so a control character or a byte that is not UTF-8 in a host's string comes
back as a `\\u` escape, never raw; a log line is escaped by `shown` first, as `logs` prints it).

Every list is bounded, with `left_out` counting what was not sent. Every tool only reads: none
deletes, copies, starts or stops anything, whatever its arguments (`READ_ONLY` says so to the
client, and tests/fleet/test_mcp.py holds every tool's name and description to it).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

from fleetdeck.backend.actions.holders import find_holders
from fleetdeck.backend.fleet.config import ConfigError, Fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.logs import bounded_pattern, log_lines
from fleetdeck.backend.fleet.models import run_json, unreachable_json
from fleetdeck.backend.fleet.poller import poll_fleet
from fleetdeck.backend.fleet.run_order import ordered_runs
from fleetdeck.backend.fleet.run_wait import RunNotFound, wait_for_run
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.history.store import History, history_path
from fleetdeck.backend.monitor.silences import SilenceStore, load_silences
from fleetdeck.cli import alerts as alerts_cli
from fleetdeck.cli import schedules as schedules_cli
from fleetdeck.cli import silence as silence_cli
from fleetdeck.cli.history import write_json

#: the most a list in an answer holds, the longest a wait may be asked for, the longest window
#: of history (the database keeps 14 days) and the most rows of one history series
LIST_MAX = 500
LINES_MAX = 200
WAIT_MAX_S = 3600.0
HISTORY_MAX_S = 14 * 86400.0
ROWS_MAX = 500
#: how many matches `run_log_grep` asks the host for, to count those it leaves out
GREP_COUNT = 5000


def answer(doc: dict[str, Any]) -> str:
    """`doc` as the CLI prints it with `--json`."""
    return json.dumps(doc, indent=1)


def refused(code: str, message: str, **about: Any) -> str:
    """An answer that says why nothing could be read: `{..., "error": {"code", "message"}}`."""
    return answer({**about, "error": {"code": code, "message": message}})


def bounded(doc: dict[str, Any], key: str, limit: int, count: str = "left_out") -> dict[str, Any]:
    """`doc` with its list `key` cut to `limit` items and `count` counting the rest."""
    items = doc[key]
    return {**doc, key: items[:limit], count: max(0, len(items) - limit)}


#: the lists of a host in `status --json` that grow with what runs on it
HOST_LISTS = ("runs", "schedules", "processes")


def bounded_host(doc: dict[str, Any], limit: int) -> dict[str, Any]:
    """A host of `status --json` with each of its HOST_LISTS cut to `limit` items, and
    `left_out` counting the rest of each: `{"runs": n, "schedules": n, "processes": n}`."""
    return {
        **doc,
        **{k: doc[k][:limit] for k in HOST_LISTS},
        "left_out": {k: max(0, len(doc[k]) - limit) for k in HOST_LISTS},
    }


def clamp(v: float, lo: float, hi: float) -> float:
    """`v` within [lo, hi]."""
    return max(lo, min(float(v), hi))


class FleetTools:
    """The tools, each over one fleet: a method's name is its tool's name (but `wait_for_run`'s,
    whose method name leaves the backend's function its own) and its docstring the tool's
    description."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def host_error(self, host: str) -> str | None:
        """The answer for a host the fleet file does not name; None for one it does."""
        try:
            self.fleet.host(host)
        except ConfigError as e:
            return refused("unknown-host", str(e), host=host)
        return None

    async def fleet_status(self, limit: int = 200) -> str:
        """Every host's GPUs, memory, disks, runs and schedules: `fleetdeck status --json`, each
        host's runs, schedules and processes at most `limit` (500) each, `left_out` per host."""
        snap = await poll_fleet(self.fleet, None)
        doc = snap.to_json()
        n = int(clamp(limit, 1, LIST_MAX))
        hosts = [bounded_host(h, n) for h in doc["hosts"]]
        return answer({**doc, "hosts": hosts, "fleet": self.fleet.source})

    async def runs(self, limit: int = 100) -> str:
        """Training runs, live first, with their loss series and state reasons: `fleetdeck runs
        --json`, at most `limit` (500) of them."""
        snap = await poll_fleet(self.fleet, None)
        listed = ordered_runs(snap.runs, [h.name for h in snap.hosts])
        doc = {
            "runs": [run_json(r) for r in listed],
            "unreachable": [
                unreachable_json(h.name, h.error, h.error_code)
                for h in snap.hosts
                if not h.reachable
            ],
        }
        return answer(bounded(doc, "runs", int(clamp(limit, 1, LIST_MAX))))

    async def run_log(self, host: str, run: str, lines: int = 40) -> str:
        """The last `lines` (at most 200) lines of a run's train.log, each escaped as `fleetdeck logs`
        prints it."""
        n = int(clamp(lines, 1, LINES_MAX))
        if (bad := self.host_error(host)) is not None:
            return bad
        out: list[str] = []
        try:
            async with HostLink(self.fleet.host(host)) as link:
                async for line in log_lines(link, run, n, False):
                    out.append(shown(line.expandtabs()))
        except HostError as e:
            return refused(e.code, e.message, host=host, run=run)
        return answer({"host": host, "run": run, "lines": out[-n:]})

    async def run_log_grep(
        self, host: str, run: str, pattern: str, regex: bool = False, lines: int = 40
    ) -> str:
        """The last `lines` (at most 200) lines of a run's train.log that match `pattern`, escaped as
        `fleetdeck logs --grep` prints them; `left_out` counts earlier matches. The pattern is a
        literal string unless `regex` is true; a regex is bounded (at most 200 characters, no
        repeated group, no backreference or lookaround, at most three unbounded repetitions)."""
        n = int(clamp(lines, 1, LINES_MAX))
        about = {"host": host, "run": run, "pattern": pattern, "regex": bool(regex)}
        try:
            grep = bounded_pattern(pattern, literal=not regex)
        except ValueError as e:
            return refused("bad-pattern", str(e), **about)
        if (bad := self.host_error(host)) is not None:
            return bad
        found: list[str] = []
        try:
            async with HostLink(self.fleet.host(host)) as link:
                async for line in log_lines(link, run, GREP_COUNT, False, grep=grep):
                    found.append(shown(line.expandtabs()))
        except HostError as e:
            return refused(e.code, e.message, **about)
        return answer(
            {
                **about,
                "lines": found[-n:],
                "left_out": max(0, len(found) - n),
                "counted_all": len(found) < GREP_COUNT,
            }
        )

    async def schedules(self, host: str = "", stray_only: bool = False, limit: int = 100) -> str:
        """Schedules and loops on every host (or `host`), stray first, each with why it is stray:
        `fleetdeck schedules --json`, at most `limit` (500)."""
        if host and (bad := self.host_error(host)) is not None:
            return bad
        snap = await poll_fleet(self.fleet, None)
        hosts = {host} if host else {h.name for h in snap.hosts}
        every = list(snap.schedules)
        rows = schedules_cli.listed(every, hosts, stray_only, None)
        down = [
            (h.name, h.error or "unknown error", h.error_code)
            for h in snap.hosts
            if not h.reachable and h.name in hosts
        ]
        doc = schedules_cli.schedules_doc(rows, every, down)
        return answer(bounded(doc, "schedules", int(clamp(limit, 1, LIST_MAX))))

    async def alerts(self, limit: int = 100) -> str:
        """Alerts firing now, then recently resolved, each with the silence holding it: `fleetdeck
        alerts --json`, at most `limit` (500), with any warning the silences file gave."""
        judged = await alerts_cli.judged_alerts(self.fleet)
        warnings: list[str] = []
        store = SilenceStore(warn=warnings.append)
        store.refresh()
        doc = alerts_cli.alerts_doc(judged, alerts_cli.held_by(judged, store, time.time()))
        return answer(
            {**bounded(doc, "alerts", int(clamp(limit, 1, LIST_MAX))), "warnings": warnings}
        )

    async def silences(self, limit: int = 100) -> str:
        """Silences in force, then the recently ended: `fleetdeck silence list --json`, at most `limit`
        (500), with any warning the silences file gave."""
        saved, warnings = await asyncio.to_thread(load_silences)
        now = time.time()
        doc = silence_cli.silences_doc(silence_cli.in_order(saved, now), now)
        return answer(
            {**bounded(doc, "silences", int(clamp(limit, 1, LIST_MAX))), "warnings": warnings}
        )

    async def history(self, host: str, since_s: float = 86400.0, rows: int = 120) -> str:
        """One host's recorded GPU memory and utilisation, disk use, losses and answers over the last
        `since_s` seconds (at most 14 days): `fleetdeck history HOST --json`, the newest `rows` (at
        most 500) rows of each series."""
        path = history_path()
        if not path.exists():
            return refused("no-history", f"no history yet ({path} does not exist)", host=host)
        now = time.time()
        since = now - clamp(since_s, 1.0, HISTORY_MAX_S)
        keep = int(clamp(rows, 1, ROWS_MAX))

        def read() -> str:
            out = io.StringIO()
            hist = History(path)
            try:
                write_json(hist, host, since, now, out, keep=keep)
            finally:
                hist.close()
            return out.getvalue()

        return await asyncio.to_thread(read)

    async def holders(self, host: str, path: str, limit: int = 100) -> str:
        """The processes on `host` holding a file under `path` open, mapped or as their working folder:
        `fleetdeck holders HOST PATH --json`, at most `limit` (500)."""
        if (bad := self.host_error(host)) is not None:
            return bad
        try:
            async with HostLink(self.fleet.host(host)) as link:
                rep = await find_holders(link, path)
        except HostError as e:
            return refused(e.code, e.message, host=host, path=path)
        n = int(clamp(limit, 1, LIST_MAX))
        doc = bounded(rep.to_json(), "holders", n)
        return answer(bounded(doc, "unreadable", n, count="unreadable_left_out"))

    async def gpu_holders(self, host: str, gpu: int = 0, limit: int = 100) -> str:
        """Who holds one GPU's memory: the GPU (index `gpu`) on `host` as `fleetdeck status --json`
        lists it, its processes at most `limit` (500)."""
        if (bad := self.host_error(host)) is not None:
            return bad
        snap = await poll_fleet(self.fleet, [host])
        doc = snap.hosts[0].to_json()
        if not snap.hosts[0].reachable:
            return refused(
                doc["error_code"] or "unreachable", doc["error"] or "not answering", host=host
            )
        card = next((g for g in doc["gpus"] if g["index"] == gpu), None)
        if card is None:
            return refused("no-gpu", f"{host} has no GPU {gpu}", host=host, gpu=gpu)
        return answer({"host": host, **bounded(card, "processes", int(clamp(limit, 1, LIST_MAX)))})

    async def wait_for_run_end(self, host: str, run: str, timeout_s: float = 600.0) -> str:
        """Block until a run finished with a whole final adapter, failed, or the timeout (at most 3600
        s) passed: `fleetdeck wait HOST RUN --json`."""
        if (bad := self.host_error(host)) is not None:
            return bad
        try:
            res = await wait_for_run(self.fleet, host, run, clamp(timeout_s, 1.0, WAIT_MAX_S), 5.0)
        except RunNotFound as e:
            return refused(e.code, e.message, host=host, run=run)
        return answer(res.to_json())


#: each tool's name and the method that answers it
TOOL_METHODS = {
    "fleet_status": "fleet_status",
    "runs": "runs",
    "run_log": "run_log",
    "run_log_grep": "run_log_grep",
    "schedules": "schedules",
    "alerts": "alerts",
    "silences": "silences",
    "history": "history",
    "holders": "holders",
    "gpu_holders": "gpu_holders",
    "wait_for_run": "wait_for_run_end",
}


def register_tools(server: Any, fleet: Fleet, read_only: Any) -> None:
    """Add every tool to `server` (an `MCPServer`), each over `fleet`, each marked `read_only`
    (the SDK's `ToolAnnotations`)."""
    tools = FleetTools(fleet)
    for name, method in TOOL_METHODS.items():
        fn = getattr(tools, method)
        # the docstring as one paragraph: its line breaks are the source's, not the sentence's
        said = " ".join((fn.__doc__ or "").split())
        server.tool(name=name, description=said, annotations=read_only, structured_output=False)(fn)
